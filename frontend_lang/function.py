"""@function: a Python program over a ProgramState, run once (`run`) or many times (`run_batch`)."""

import functools
from concurrent.futures import ThreadPoolExecutor

from radixlm.frontend_lang.backends import as_backend, get_default_backend
from radixlm.frontend_lang.state import ProgramState


class SglFunction:
    def __init__(self, func):
        self.func = func
        functools.update_wrapper(self, func)

    def _backend(self, backend):
        backend = backend if backend is not None else get_default_backend()
        if backend is None:
            raise ValueError("no backend: pass backend= or call set_default_backend(...)")
        return as_backend(backend)

    def run(self, *args, backend=None, stream: bool = False, **kwargs) -> ProgramState:
        """Run the program; returns its state once every queued request has finished (errors raise).

        stream=True returns at once while the program runs in the background; iterate
        `state.text_iter()` for its text as it is produced.
        """
        state = ProgramState(self._backend(backend))
        if stream:
            return state._run_streamed(self.func, args, kwargs)
        self.func(state, *args, **kwargs)
        return state.sync()

    def run_batch(self, batch_kwargs: list, backend=None, num_threads="auto", progress_bar: bool = False) -> list:
        """One state per kwargs dict, in order; programs run concurrently on num_threads threads.

        A program that fails returns its state with the error kept (state.error()); reads raise it.
        """
        backend = self._backend(backend)
        if num_threads == "auto" or num_threads is None:
            num_threads = max(1, min(64, len(batch_kwargs)))

        def one(kwargs):
            state = ProgramState(backend)
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


def function(func=None):
    """Decorator: @function or @function()."""
    if func is None:
        return SglFunction
    return SglFunction(func)
