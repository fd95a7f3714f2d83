"""GeneratedCalls: a turn is found only by exactly its calls and content, and only by the key that
generated it; the oldest turns are forgotten first."""

from radixlm.runtime.openai.tool_calls.history import GeneratedCalls

CALLS = [("call_1", "add", '{"a": 2, "b": 3}'), ("call_2", "weather", '{"city": "paris"}')]
SENT_BACK = [("call_1", "add", {"b": 3, "a": 2}), ("call_2", "weather", {"city": "paris"})]   # parsed, reordered


def test_found_only_as_generated():
    store = GeneratedCalls()
    store.save(CALLS, "", [5, 6, 7])
    assert store.lookup(SENT_BACK, "") == [5, 6, 7]
    assert store.lookup(SENT_BACK, "other content") is None
    assert store.lookup([SENT_BACK[0]], "") is None                                   # a call missing
    assert store.lookup([SENT_BACK[0], ("call_2", "weather", {"city": "rome"})], "") is None
    assert store.lookup([("call_9", "add", {"a": 2, "b": 3})], "") is None


def test_each_key_sees_only_its_own_turns():
    store = GeneratedCalls()
    alice, bob, keyless = store.scoped(0), store.scoped(1), store.scoped(None)
    alice.save(CALLS, "", [1, 2])
    assert alice.lookup(SENT_BACK, "") == [1, 2]
    assert bob.lookup(SENT_BACK, "") is None and keyless.lookup(SENT_BACK, "") is None
    bob.save(CALLS, "", [3, 4])                     # the same call ids under another key replace nothing
    assert alice.lookup(SENT_BACK, "") == [1, 2] and bob.lookup(SENT_BACK, "") == [3, 4]


def test_oldest_forgotten_first():
    store = GeneratedCalls(max_turns=2)
    for i in range(3):
        store.save([(f"call_{i}", "add", "{}")], "", [i])
    assert len(store) == 2
    assert store.lookup([("call_0", "add", {})], "") is None
    assert [store.lookup([(f"call_{i}", "add", {})], "") for i in (1, 2)] == [[1], [2]]
