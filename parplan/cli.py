"""The ``parplan`` command line: each subcommand parses, calls one library function, prints, returns an exit code."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
import importlib
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from parplan._json import dumps

EXIT_OK, EXIT_USAGE, EXIT_INFEASIBLE = 0, 2, 3
# Start-up: nothing here imports the cost model, numpy or Optuna at module level. Each sub-command's
# parser is built when it parses or prints help (``_LazyParser``), so `parplan --help` and a flag error
# cost an interpreter and argparse; a command's implementation is imported when it runs.


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"parplan: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


class _LazyParser(_Parser):
    """A sub-command's parser whose arguments ``build(parser)`` adds the first time it parses or prints help."""

    def __init__(self, *args: Any, build: Callable[[argparse.ArgumentParser], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._build = build

    def built(self) -> _LazyParser:
        """This parser with its arguments added (once)."""
        build, self._build = self._build, None
        if build is not None:
            build(self)
        return self

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        return super(_LazyParser, self.built()).parse_known_args(args, namespace)

    def format_help(self) -> str:
        return super(_LazyParser, self.built()).format_help()

    def format_usage(self) -> str:
        return super(_LazyParser, self.built()).format_usage()


class _Into:
    """What ``cli_X.register(subparsers)`` takes, filling the one lazy parser made for its command.

    ``register`` calls ``subparsers.add_parser(name, help=..., description=..., ...)`` once; the
    ``help`` line is the one :data:`COMMANDS` shows, the other settings go onto ``parser``.
    """

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.pop("help", None)
        for key, value in kwargs.items():  # description, epilog, formatter_class
            setattr(self.parser, key, value)
        return self.parser


def _fmt_params(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def _print_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())


def cmd_catalog(args: argparse.Namespace) -> int:
    from parplan import api

    if args.kind == "models":
        models = api.list_models()
        if args.json:
            print(dumps(models))
            return EXIT_OK
        _print_table([[m["name"], _fmt_params(m["num_params"]), str(m["num_layers"]), str(m["hidden_size"]),
                       f'{m["num_attention_heads"]}/{m["num_query_groups"]}', str(m["ffn_hidden_size"]),
                       str(m["vocab_size"]), str(m["num_experts"] or "-")] for m in models],
                     ["name", "params", "layers", "hidden", "heads/kv", "ffn", "vocab", "experts"])
        return EXIT_OK
    gpus = api.list_gpus()
    if args.json:
        print(dumps(gpus))
        return EXIT_OK
    _print_table([[g["name"], f'{g["peak_tflops"].get("bf16", 0):.0f}', f'{g["peak_tflops"].get("fp8", 0) or "-"}',
                   f'{g["hbm_capacity_GiB"]:.1f}', f'{g["hbm_bandwidth_GBps"]:.0f}',
                   f'{g["intra_node_bandwidth_GBps"]:.0f}', str(g["nvlink_domain_size"]),
                   f'{g["inter_node_bandwidth_GBps"]:.1f}'] for g in gpus],
                 ["name", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM GiB", "HBM GB/s", "scale-up GB/s", "domain",
                  "scale-out GB/s"])
    return EXIT_OK


def _print_prediction(result: dict[str, Any]) -> None:
    status = "fits" if result["fits"] else "does NOT fit"
    print(f"Run {status}: peak {result['peak_memory_gib']:.1f} GiB per GPU (stage {result['peak_memory_stage']}), "
          f"{result['usable_memory_gib']:.1f} GiB usable")
    _print_table([[k.removesuffix("_gib"), f"{v:.2f}"] for k, v in result["memory"].items()], ["memory", "GiB"])
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu"):
        if key in result:
            print(f"{key}: {result[key]}")
    if "breakdown" in result:
        _print_table([[k, f"{v:.4f}"] for k, v in result["breakdown"].items()], ["breakdown", "s"])
    if result.get("stages"):
        _print_table([[label, str(st["layers"]), f"{st['forward_s'] * 1e3:.2f}", f"{st['backward_s'] * 1e3:.2f}",
                       f"{st['optimizer_s'] * 1e3:.2f}", f"{st['compute_s']:.4f}"]
                      for label, st in _stage_groups(result["stages"])],
                     ["stage", "layers", "fwd ms/mb", "bwd ms/mb", "optimizer ms", "compute s/step"])
    print(f"profile: {result.get('profile') or 'none (analytic models only)'}")
    if "framework" in result:
        print(f"framework: {result['framework']}")
    print("defaults assumed: " + (", ".join(f"{d['knob']}={d['value']} ({d['source']})"
                                            for d in result.get("defaults_assumed", [])) or "none"))
    for violation in result["violations"]:
        print(f"violation: {violation}")
    for warning in result.get("warnings", []):
        print(f"warning: {warning}")


def _stage_groups(stages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Runs of consecutive stages with equal figures, labelled ``3`` or ``1-14``."""
    groups: list[tuple[int, int, dict[str, Any]]] = []
    for st in stages:
        figures = {k: v for k, v in st.items() if k != "stage"}
        if groups and groups[-1][2] == figures:
            groups[-1] = (groups[-1][0], st["stage"], figures)
        else:
            groups.append((st["stage"], st["stage"], figures))
    return [(str(a) if a == b else f"{a}-{b}", figures) for a, b, figures in groups]


def cmd_predict(args: argparse.Namespace) -> int:
    from parplan import api

    result = api.predict_file(args.run_spec, args.profile)
    if args.json:
        print(dumps(result))
    else:
        _print_prediction(result)
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from parplan import api

    result = api.validate_file(args.validation_set, args.profile)
    if args.json:
        print(dumps(result))
        return EXIT_OK
    rows = []
    for r in result["runs"]:
        err = "-" if r["error"] is None else f"{100 * r['error']:+.1f}%"
        pred = "-" if r["predicted_step_time_s"] is None else f"{r['predicted_step_time_s']:.3f}"
        rows.append([r["id"], f"{r['measured_step_time_s']:.3f}", pred, err, r.get("reason", "")[:60]])
    _print_table(rows, ["run", "measured s", "predicted s", "error", "note"])
    if result["mape"] is not None:
        print(f"MAPE {100 * result['mape']:.1f}% over {result['n']} runs")
    if "baseline" in result:
        b = result["baseline"]
        print(f"baseline (one constant MFU = {b['mfu']:.3f} fitted on this set): MAPE {100 * b['mape']:.1f}%")
    if "interval_coverage" in result:
        print(f"80% interval coverage: {100 * result['interval_coverage']:.0f}%")
    for key, groups in result.get("groups", {}).items():
        _print_table([[name, str(g["n"]), f"{100 * g['mape']:.1f}%", f"{100 * g['constant_mfu_mape']:.1f}%",
                       f"{g['constant_mfu']:.3f}"] for name, g in groups.items()],
                     [key, "runs", "MAPE", "constant-MFU MAPE", "its MFU"])
    return EXIT_OK


EXIT_CODES = """exit codes:
  0    success
  1    unfinished: a study worker left problems to other workers, or a profile run's collective sweep failed
  2    bad input: one line on stderr names the field, the value and what is allowed
  3    search: no strategy fits (predict reports a run that does not fit with fits: false and exit 0)
  130  interrupted (Ctrl-C); stored trials and study results are kept, the same command resumes"""


def _build_catalog(cat: argparse.ArgumentParser) -> None:
    cat.description = "List the built-in model or GPU catalog."
    cat.add_argument("kind", choices=("models", "gpus"))
    cat.add_argument("--json", action="store_true", help="print JSON only")
    cat.set_defaults(func=cmd_catalog)


def _build_predict(pred: argparse.ArgumentParser) -> None:
    pred.description = ("Predict per-GPU memory, legality and (when the cost model provides it) step time of one "
                        "run spec (YAML or JSON, see docs/run_spec.md in the repository).")
    pred.add_argument("run_spec", help="path to a run spec (.yaml, .yml or .json)")
    pred.add_argument("--json", action="store_true", help="print only the contract JSON")
    pred.add_argument("--profile", metavar="DIR", default=None,
                      help="a profile directory (from `parplan profile`) instead of the GPU's built-in profile")
    pred.set_defaults(func=_dlrm_routed(cmd_predict, "cmd_predict"))


def _build_validate(val: argparse.ArgumentParser) -> None:
    val.description = ("Predict every run of a validation set (YAML list of runs with measured step times) and "
                       "print per-run error, MAPE and a constant-MFU baseline.")
    val.add_argument("validation_set", help="e.g. studies/validation/public.yaml")
    val.add_argument("--json", action="store_true", help="print only JSON")
    val.add_argument("--profile", metavar="DIR", default=None, help="use this profile directory for every run")
    val.set_defaults(func=cmd_validate)


def _build_search(search: argparse.ArgumentParser) -> None:
    from parplan import cli_search

    cli_search.register(_Into(search))
    search.set_defaults(func=_dlrm_routed(search.get_default("func"), "cmd_search"))


def _registered(module: str) -> Callable[[argparse.ArgumentParser], None]:
    """A builder that lets ``parplan.<module>.register`` fill the parser."""
    def build(parser: argparse.ArgumentParser) -> None:
        importlib.import_module(f"parplan.{module}").register(_Into(parser))
    return build


def _dlrm_routed(llm: Callable[[argparse.Namespace], int], name: str) -> Callable[[argparse.Namespace], int]:
    """``llm``, except that DLRM run specs go to ``parplan.cli_recsys.<name>`` (imported when the command runs)."""
    def dispatch(args: argparse.Namespace) -> int:
        from parplan import cli_recsys

        # cli_recsys.route holds the rule which specs are DLRM ones; applied to a holder parser here.
        holder = argparse.ArgumentParser(add_help=False)
        holder.set_defaults(func=llm)
        cli_recsys.route(holder, getattr(cli_recsys, name))
        return int(holder.get_default("func")(args))
    return dispatch


COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "catalog": ("list the built-in models or GPUs", _build_catalog),
    "predict": ("predict memory (and time) of one run spec", _build_predict),
    "validate": ("predict published runs and report the error", _build_validate),
    "search": ("find the fastest (or cheapest) parallelism strategy", _build_search),
    "study": ("batch studies over models x GPU kinds x GPU counts", _registered("cli_study")),
    "profile": ("measure operator timings on this machine, fit them, or import a trace", _registered("cli_profile")),
    "replay": ("replay a PyTorch profiler trace; what-if edits of it", _registered("cli_replay")),
}
"""Each sub-command: the line `parplan --help` shows (its module's ``register`` passes the same ``help``;
tests/parplan/test_cli_startup.py checks it), and what builds its parser."""


def build_parser() -> argparse.ArgumentParser:
    """The ``parplan`` parser; each sub-command's arguments are added when it first parses or prints help."""
    parser = _Parser(prog="parplan", description="Plan the parallelism of LLM training jobs.",
                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"parplan {__import__('parplan').__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_LazyParser)
    for name, (summary, build) in COMMANDS.items():
        sub.add_parser(name, help=summary, build=build)
    comp = sub.add_parser("completion", help="print a shell completion script (bash, zsh, tcsh)",
                          description="Print the completion script of a shell, e.g. "
                                      "`parplan completion bash > ~/.local/share/bash-completion/completions/parplan`.")
    comp.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    comp.set_defaults(func=partial(cmd_completion, parser))
    return parser


def built(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with every lazy sub-command parser built (for tools that walk it, such as shtab)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if isinstance(sub, _LazyParser):
                    built(sub.built())
    return parser


def cmd_completion(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    import shtab

    print(shtab.complete(built(parser), shell=args.shell))
    return EXIT_OK


_format_warning = warnings.formatwarning


def _one_line_warning(message: Warning | str, category: type[Warning], *rest: Any, **kw: Any) -> str:
    """``parplan: warning: ...`` for parplan's own warnings; others as Python formats them."""
    from costmodel.specs.notices import ParplanWarning  # a warning comes from code that imported it already

    if issubclass(category, ParplanWarning):
        return f"parplan: warning: {message}\n"
    return _format_warning(message, category, *rest, **kw)


def main(argv: Sequence[str] | None = None) -> int:
    warnings.formatwarning = _one_line_warning  # type: ignore[assignment]
    parser = build_parser()
    args = parser.parse_args(argv)
    from costmodel.specs.errors import SpecError  # after parsing: a flag error needs no cost-model package

    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
        return code
    except SpecError as exc:
        sys.stderr.write(f"parplan: error: {exc}\n")
        return EXIT_USAGE
    except BrokenPipeError:  # the reader left early (`parplan search ... | head`): not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces the closed stream until exit
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
