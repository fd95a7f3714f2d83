"""Command line: `radixlm serve [options]` (also `python -m radixlm.runtime.cli serve`).

The serve flags are generated from ServerArgs (`radixlm serve --help` lists them).
"""

import argparse
import sys

from radixlm.runtime.server_args import add_cli_args, from_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="radixlm", description="radixlm: a structured-generation LLM runtime")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="serve a model over HTTP (SGLang-native and OpenAI-compatible API)",
                                description="Serve a model over HTTP: /generate and /v1/...")
    add_cli_args(serve)
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command == "serve":
        try:
            args = from_cli(ns)
        except ValueError as exc:
            parser.error(str(exc))
        if args.tp_size > 1:
            from radixlm.runtime.server.launch import check_tp_model, run_tp_node
            try:
                check_tp_model(args)
            except (ValueError, FileNotFoundError) as exc:
                parser.error(str(exc))
            if args.node_rank > 0:
                sys.exit(run_tp_node(args))
        from radixlm.runtime.server.http_server import serve
        sys.exit(serve(args))


if __name__ == "__main__":
    main()
