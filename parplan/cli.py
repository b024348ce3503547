"""The ``parplan`` command line: each subcommand parses, calls one library function, prints, returns an exit code."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any

from costmodel.specs.errors import SpecError
from costmodel.specs.notices import ParplanWarning
from parplan import api
from parplan._json import dumps

EXIT_OK, EXIT_USAGE, EXIT_INFEASIBLE = 0, 2, 3


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"parplan: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


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
    result = api.predict_file(args.run_spec, args.profile)
    if args.json:
        print(dumps(result))
    else:
        _print_prediction(result)
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="parplan", description="Plan the parallelism of LLM training jobs.",
                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"parplan {__import__('parplan').__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    cat = sub.add_parser("catalog", help="list the built-in models or GPUs",
                         description="List the built-in model or GPU catalog.")
    cat.add_argument("kind", choices=("models", "gpus"))
    cat.add_argument("--json", action="store_true", help="print JSON only")
    cat.set_defaults(func=cmd_catalog)

    pred = sub.add_parser("predict", help="predict memory (and time) of one run spec",
                          description="Predict per-GPU memory, legality and (when the cost model provides it) "
                                      "step time of one run spec (YAML or JSON, see docs/run_spec.md in the repository).")
    pred.add_argument("run_spec", help="path to a run spec (.yaml, .yml or .json)")
    pred.add_argument("--json", action="store_true", help="print only the contract JSON")
    pred.add_argument("--profile", metavar="DIR", default=None,
                      help="a profile directory (from `parplan profile`) instead of the GPU's built-in profile")
    pred.set_defaults(func=cmd_predict)

    val = sub.add_parser("validate", help="predict published runs and report the error",
                         description="Predict every run of a validation set (YAML list of runs with measured "
                                     "step times) and print per-run error, MAPE and a constant-MFU baseline.")
    val.add_argument("validation_set", help="e.g. studies/validation/public.yaml")
    val.add_argument("--json", action="store_true", help="print only JSON")
    val.add_argument("--profile", metavar="DIR", default=None, help="use this profile directory for every run")
    val.set_defaults(func=cmd_validate)

    from parplan import cli_profile, cli_recsys, cli_replay, cli_search, cli_study

    cli_search.register(sub)
    cli_recsys.route(pred, cli_recsys.cmd_predict)  # DLRM run specs (recsys: block) go to cli_recsys
    cli_recsys.route(sub.choices["search"], cli_recsys.cmd_search)
    cli_study.register(sub)
    cli_profile.register(sub)
    cli_replay.register(sub)

    comp = sub.add_parser("completion", help="print a shell completion script (bash, zsh, tcsh)",
                          description="Print the completion script of a shell, e.g. "
                                      "`parplan completion bash > ~/.local/share/bash-completion/completions/parplan`.")
    comp.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    comp.set_defaults(func=partial(cmd_completion, parser))
    return parser


def cmd_completion(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    import shtab

    print(shtab.complete(parser, shell=args.shell))
    return EXIT_OK


_format_warning = warnings.formatwarning


def _one_line_warning(message: Warning | str, category: type[Warning], *rest: Any, **kw: Any) -> str:
    """``parplan: warning: ...`` for parplan's own warnings; others as Python formats them."""
    if issubclass(category, ParplanWarning):
        return f"parplan: warning: {message}\n"
    return _format_warning(message, category, *rest, **kw)


def main(argv: Sequence[str] | None = None) -> int:
    warnings.formatwarning = _one_line_warning  # type: ignore[assignment]
    parser = build_parser()
    args = parser.parse_args(argv)
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
