"""radixlm.frontend_lang: SGLang-style programs (`@function` with gen, select, fork and role blocks).

    ir.py        the expressions `s += ...` queues: Text, Gen, Select, role blocks, SetVar, var scopes
    primitives.py  gen, gen_int, gen_string, select, system/user/assistant with SGLang's signatures
    dtypes.py    gen(dtype=...) regexes
    state.py     ProgramState (executes its queue on a worker thread; text_iter for streamed runs), ForkGroup
    text_stream.py  TextStream: the pieces a streamed program appends, replayed by text_iter
    choice_scoring.py  select() scoring over the cached context (token boundary, normalization methods)
    chat.py      role prefixes/suffixes from the tokenizer's chat template
    backends.py  EngineBackend (in-process Engine), RuntimeEndpoint (native /generate), default backend
    function.py  @function, run, run_batch
"""

from radixlm.frontend_lang.backends import (
                                            BaseBackend,
                                            EngineBackend,
                                            RuntimeEndpoint,
                                            get_default_backend,
                                            set_default_backend,
)
from radixlm.frontend_lang.function import SglFunction, function
from radixlm.frontend_lang.primitives import (
                                            assistant,
                                            gen,
                                            gen_int,
                                            gen_string,
                                            greedy_token_selection,
                                            select,
                                            system,
                                            token_length_normalized,
                                            unconditional_likelihood_normalized,
                                            user,
)
from radixlm.frontend_lang.state import ForkGroup, ProgramState

__all__ = ["BaseBackend", "EngineBackend", "RuntimeEndpoint", "get_default_backend", "set_default_backend",
           "SglFunction", "function", "assistant", "gen", "gen_int", "gen_string", "select", "system", "user",
           "token_length_normalized", "greedy_token_selection", "unconditional_likelihood_normalized",
           "ForkGroup", "ProgramState"]
