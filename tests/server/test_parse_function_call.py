"""SGLang's native POST /parse_function_call on the shared server (its plain template: the generic
format by default; tool_call_parser picks another)."""

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


def test_parse_function_call_route(server):
    text = 'Sure.\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
    r = server.post("/parse_function_call", json={"text": text, "tool_call_parser": "qwen25", "tools": TOOLS})
    assert r.status_code == 200, r.text
    assert r.json() == {"normal_text": "Sure.", "calls": [{"tool_index": 0, "name": "add", "parameters": '{"a": 1}'}]}
    r = server.post("/parse_function_call", json={"text": '{"tool_calls": [{"name": "add", "arguments": {}}]}',
                                                  "tools": TOOLS})
    assert r.json() == {"normal_text": "", "calls": [{"tool_index": 0, "name": "add", "parameters": "{}"}]}
    r = server.post("/parse_function_call", json={"text": "x", "tool_call_parser": "nope", "tools": TOOLS})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_call_parser"
    r = server.post("/parse_function_call", json={"text": "x", "tools": [{"type": "function", "function": {}}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools.0.function.name"
    r = server.post("/parse_function_call", json={"tools": TOOLS})
    assert r.status_code == 400 and r.json()["error"]["param"] == "text"
