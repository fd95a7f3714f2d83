"""client_scope: keyed namespaces never equal unkeyed ones nor each other; --api-key and
--cache-isolation are checked at startup.  Oracle: generate_input's own namespaces, built from bodies."""

import itertools

import pytest

from radixlm.runtime.api.client_scope import Caller, parse_api_keys
from radixlm.runtime.api.generate_input import GenerateReqInput
from radixlm.runtime.server_args import ServerArgs


def _request_namespaces() -> list:
    out = []
    for key, salt in itertools.product([None, "", "a", "key0/", "1:a|"], [None, "", "a", "|b"]):
        obj = GenerateReqInput(input_ids=[1, 2], extra_key=key, cache_salt=salt)
        out.append(obj.normalize()[0].cache_namespace)
    return out


def test_keyed_namespaces_are_distinct_from_each_other_and_from_request_namespaces():
    requested = _request_namespaces()
    unkeyed = {Caller(k, isolated=False).namespace(ns) for k in (None, 0, 1) for ns in requested}
    assert unkeyed == set(requested)           # without isolation the key changes nothing
    keyed = [(k, ns, Caller(k, isolated=True).namespace(ns)) for k in (0, 1, 12) for ns in set(requested)]
    spaces = [s for _, _, s in keyed]
    assert len(set(spaces)) == len(spaces)     # one namespace per (key, request namespace)
    assert not set(spaces) & set(requested)
    assert Caller(None, isolated=True).namespace("3:abc|") == "3:abc|"


def test_api_keys_parse_and_bad_lists_are_refused():
    assert parse_api_keys(None) == [] and parse_api_keys("k1") == ["k1"]
    assert parse_api_keys("k1, k2") == ["k1", "k2"]
    for bad, words in (("k1,,k2", "empty key"), ("k1,k1", "same key twice")):
        with pytest.raises(ValueError, match=words):
            parse_api_keys(bad)


def test_server_args_check_cache_isolation():
    assert ServerArgs(api_key="a,b", cache_isolation="per-key").cache_isolation == "per-key"
    with pytest.raises(ValueError, match="needs --api-key"):
        ServerArgs(cache_isolation="per-key")
    with pytest.raises(ValueError, match="cache_isolation must be one of off, per-key"):
        ServerArgs(api_key="a", cache_isolation="per-user")
    with pytest.raises(ValueError, match="empty key"):
        ServerArgs(api_key="a,")
