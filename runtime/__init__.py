"""The serving runtime: one subpackage per part of a request's path (api, server, openai, scheduler, runner, models, dp, distributed, speculative) and the modules they share."""
