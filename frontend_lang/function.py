"""@function: a Python program over a ProgramState, run once (`run`) or many times (`run_batch`)."""

import functools
from concurrent.futures import ThreadPoolExecutor

from radixlm.frontend_lang.backends import as_backend, get_default_backend
from radixlm.frontend_lang.state import ProgramState

# SGLang's run()/run_batch() sampling arguments: defaults for every gen of the program (gen() argument names)
RUN_DEFAULTS = {"max_new_tokens": "max_tokens", "n": "n", "stop": "stop", "stop_token_ids": "stop_token_ids",
                "stop_regex": "stop_regex", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                "min_p": "min_p", "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
                "ignore_eos": "ignore_eos", "return_logprob": "return_logprob",
                "logprob_start_len": "logprob_start_len", "top_logprobs_num": "top_logprobs_num",
                "return_text_in_logprobs": "return_text_in_logprobs"}


def split_defaults(kwargs: dict) -> tuple:
    """(the program's own kwargs, the sampling defaults among them in gen() names; None values dropped)."""
    own = {k: v for k, v in kwargs.items() if k not in RUN_DEFAULTS}
    defaults = {RUN_DEFAULTS[k]: v for k, v in kwargs.items() if k in RUN_DEFAULTS and v is not None}
    return own, defaults


class SglFunction:
    def __init__(self, func, num_api_spec_tokens=None):
        self.func = func
        self.num_api_spec_tokens = num_api_spec_tokens   # SGLang's API-model speculation: accepted, unused
        functools.update_wrapper(self, func)

    def _backend(self, backend):
        backend = backend if backend is not None else get_default_backend()
        if backend is None:
            raise ValueError("no backend: pass backend= or call set_default_backend(...)")
        return as_backend(backend)

    def run(self, *args, backend=None, stream: bool = False, **kwargs) -> ProgramState:
        """Run the program; returns its state once every queued request has finished (errors raise).

        stream=True returns at once while the program runs in the background; iterate
        `state.text_iter()` for its text as it is produced.  SGLang's sampling arguments (max_new_tokens,
        temperature, stop, ...) among kwargs are defaults for the program's gens.
        """
        kwargs, defaults = split_defaults(kwargs)
        state = ProgramState(self._backend(backend), defaults=defaults)
        if stream:
            return state._run_streamed(self.func, args, kwargs)
        self.func(state, *args, **kwargs)
        return state.sync()

    def run_batch(self, batch_kwargs: list, backend=None, num_threads="auto", progress_bar: bool = False,
                  **sampling) -> list:
        """One state per kwargs dict, in order; programs run concurrently on num_threads threads;
        sampling: SGLang's run() sampling defaults for every program.

        A program that fails returns its state with the error kept (state.error()); reads raise it.
        """
        unknown, defaults = split_defaults(sampling)
        if unknown:
            raise TypeError(f"run_batch() got unexpected keyword arguments {sorted(unknown)}")
        backend = self._backend(backend)
        if num_threads == "auto" or num_threads is None:
            num_threads = max(1, min(64, len(batch_kwargs)))

        def one(kwargs):
            state = ProgramState(backend, defaults=defaults)
            try:
                self.func(state, **kwargs)
                state._idle.wait()
            except Exception as exc:
                state._idle.wait()
                state._error = state._error or exc
            return state

        bar = None
        if progress_bar:
            try:
                from tqdm import tqdm
                bar = tqdm(total=len(batch_kwargs))
            except ImportError:
                bar = None
        with ThreadPoolExecutor(max_workers=num_threads) as pool:
            futures = [pool.submit(one, kw) for kw in batch_kwargs]
            states = []
            for f in futures:
                states.append(f.result())
                if bar is not None:
                    bar.update(1)
        if bar is not None:
            bar.close()
        return states

    def __call__(self, *args, **kwargs):
        return self.run(*args, **kwargs)


def function(func=None, num_api_spec_tokens=None):
    """Decorator: @function, @function() or @function(num_api_spec_tokens=...)."""
    if func is None:
        return lambda f: SglFunction(f, num_api_spec_tokens)
    return SglFunction(func, num_api_spec_tokens)
