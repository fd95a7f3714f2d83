"""radixlm.frontend_lang: SGLang-style programs (`@function` with gen, select, fork and role blocks).

    ir.py        the expressions `s += ...` queues: Text, Gen, Select, role blocks
    state.py     ProgramState (executes its queue on a worker thread; text_iter for streamed runs), ForkGroup
    text_stream.py  TextStream: the pieces a streamed program appends, replayed by text_iter
    choice_scoring.py  select() scoring over the cached context (token boundary, normalization methods)
    chat.py      role prefixes/suffixes from the tokenizer's chat template
    backends.py  EngineBackend (in-process Engine), RuntimeEndpoint (native /generate), default backend
    function.py  @function, run, run_batch
"""

from radixlm.frontend_lang.backends import (BaseBackend, EngineBackend, RuntimeEndpoint, get_default_backend,
                                            set_default_backend)
from radixlm.frontend_lang.function import SglFunction, function
from radixlm.frontend_lang.ir import assistant, gen, select, system, user
from radixlm.frontend_lang.state import ForkGroup, ProgramState

__all__ = ["BaseBackend", "EngineBackend", "RuntimeEndpoint", "get_default_backend", "set_default_backend",
           "SglFunction", "function", "assistant", "gen", "select", "system", "user", "ForkGroup",
           "ProgramState"]
