"""Who sent a request: which API key it used (its index, never the key), and what that means for the
radix cache and for client rids.

A client rid is a label within one key: two keys may use the same rid at once, and /abort_request
reaches only the caller's own requests.  Under `--cache-isolation per-key` each key also gets its own
radix-tree namespace (combined with any cache_salt / extra_key), so a key never sees another key's
cache hits.  Without API keys every request has the same caller.
"""

from dataclasses import dataclass
from typing import Optional

ISOLATION_MODES = ("off", "per-key")
SCOPE_KEY = "radixlm_api_key"        # the index of the matched key, in the ASGI scope's state


@dataclass(frozen=True)
class Caller:
    key: Optional[int] = None        # index of the API key used; None: the server has no keys
    isolated: bool = False           # --cache-isolation per-key

    def namespace(self, ns: Optional[str]) -> Optional[str]:
        """The radix-tree namespace for a request that asked for ns (None: the shared one).  Keyed
        namespaces start with "key", request namespaces with a digit (generate_input._namespaces), so
        no keyed namespace equals an unkeyed one."""
        if not self.isolated or self.key is None:
            return ns
        return f"key{self.key}/{ns or ''}"


def parse_api_keys(value: Optional[str]) -> list:
    """--api-key "k1,k2": the keys, in order; ValueError for an empty or repeated key."""
    if value is None:
        return []
    keys = [k.strip() for k in value.split(",")]
    if any(not k for k in keys):
        raise ValueError("--api-key has an empty key; give one key or several separated by commas")
    if len(set(keys)) != len(keys):
        raise ValueError("--api-key names the same key twice")
    return keys


def caller_of(request, args) -> Caller:
    """The Caller of an HTTP request that passed the API-key check."""
    key = request.scope.get("state", {}).get(SCOPE_KEY)
    return Caller(key, getattr(args, "cache_isolation", "off") == "per-key")
