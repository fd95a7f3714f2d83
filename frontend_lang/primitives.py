"""The user-facing constructors, with SGLang's signatures (`sglang.lang.api`): gen, gen_int, gen_string,
select, and the role blocks.  Arguments left None take the program run's defaults (`run(temperature=...)`),
then the server's.

dtype (int, float, str, bool or their names) constrains a gen with SGLang's regexes; int and float also
stop at a space or newline, as SGLang's RuntimeEndpoint does.
"""

from radixlm.frontend_lang.dtypes import REGEX_BOOL, REGEX_FLOAT, REGEX_INT, REGEX_STR, dtype_constraint  # noqa: F401
from radixlm.frontend_lang.ir import Gen, RoleBlock, Select, as_expr

# choices_method values (SGLang exports objects of these names; here they are the method names)
token_length_normalized = "token_length_normalized"
greedy_token_selection = "greedy_token"
unconditional_likelihood_normalized = "unconditional_likelihood_normalized"


def gen(name=None, max_tokens=None, min_tokens=None, n=None, stop=None, stop_token_ids=None, stop_regex=None,
        temperature=None, top_p=None, top_k=None, min_p=None, frequency_penalty=None, presence_penalty=None,
        ignore_eos=None, return_logprob=None, logprob_start_len=None, top_logprobs_num=None,
        return_text_in_logprobs=None, dtype=None, choices=None, choices_method=None, regex=None,
        json_schema=None, **extra):
    """Generate into variable `name`; with choices, a select() of them."""
    if choices:
        return select(name, choices, 0.0 if temperature is None else temperature,
                      choices_method or token_length_normalized)
    if dtype is not None:
        dtype_constraint(dtype)
    params = dict(max_tokens=max_tokens, min_tokens=min_tokens, n=n, stop=stop, stop_token_ids=stop_token_ids,
                  stop_regex=stop_regex, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                  frequency_penalty=frequency_penalty, presence_penalty=presence_penalty, ignore_eos=ignore_eos,
                  return_logprob=return_logprob, logprob_start_len=logprob_start_len,
                  top_logprobs_num=top_logprobs_num, return_text_in_logprobs=return_text_in_logprobs,
                  regex=regex, json_schema=json_schema, **extra)
    return Gen(name, {k: v for k, v in params.items() if v is not None}, dtype)


def gen_int(name=None, **kwargs):
    return gen(name, dtype=int, **kwargs)


def gen_string(name=None, **kwargs):
    return gen(name, dtype=str, **kwargs)


def select(name=None, choices=None, temperature=0.0, choices_method=token_length_normalized):
    """Pick one of choices by its log-probability after the context (temperature is accepted, unused)."""
    return Select(name, list(choices or []), choices_method or token_length_normalized)


def system(body=None):
    return RoleBlock("system", None if body is None else as_expr(body))


def user(body=None):
    return RoleBlock("user", None if body is None else as_expr(body))


def assistant(body=None):
    return RoleBlock("assistant", None if body is None else as_expr(body))
