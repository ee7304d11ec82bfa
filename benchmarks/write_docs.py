"""Render docs/benchmarks.md from a GPU check run: results/gpu_check.json plus the benchmark JSONs.

    python benchmarks/write_docs.py [--results results [more ...]] [--out docs/benchmarks.md]

A check too long for one 10-minute device call runs in parts (`scripts/gpu_check.py --skip bench`, then
`--skip tests,sanitize,examples --bench ...`), each into its own folder: `--results A B` merges them
(steps and bars of every part, each benchmark from the last folder that has it; the page names the parts).

Every number in the page comes from those files (never typed by hand): machine (GPU, driver and
versions from `python -m bridge doctor`), date, the step summary, the bars, and one table per
benchmark with its missing peers and notes. Refuses to write when no file reports a GPU.

A last section shows the install and test times of the 2-core CPU machine from one record of
`benchmarks/install_time.py` (`--install-record PATH`; by default the newest `results/cpu_install_*.json`
beside the page, i.e. docs/results/; `--install-record none` leaves it out). A dry-run record is refused.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ORDER = ["launch_overhead", "launch_breakdown", "elementwise", "simt_parity", "tile_ops", "gemm", "attention", "attention_more",
         "attention_backward", "attention_gqa_varlen", "intake", "compile_time"]
ON_ITS_OWN = "on its own"      # the code entry of a folder of benchmark files run without gpu_check.py


def fmt(v: object) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list[object]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return out + [""]


def load(folder: Path, partial: bool = False) -> tuple[dict, dict[str, dict]]:
    check_path = folder / "gpu_check.json"
    if check_path.exists():
        check = json.loads(check_path.read_text())
    elif partial:
        check = {"partial": True, "date": "see each benchmark below", "code": ON_ITS_OWN}
    else:
        raise FileNotFoundError(f"{check_path} not found: run `python3 scripts/gpu_check.py` on the GPU machine "
                                "(or pass --partial to render benchmark files run on their own)")
    benches = {}
    for p in sorted(folder.glob("*.json")):
        if p.name == "gpu_check.json":
            continue
        data = json.loads(p.read_text())
        if isinstance(data, dict) and "rows" in data:
            benches[p.stem] = data
    return check, benches


def merge(parts: list[tuple[dict, dict[str, dict]]]) -> tuple[dict, dict[str, dict]]:
    """One check from the parts of a split run: their steps and bars together, the dates of all."""
    if len(parts) == 1:
        return parts[0]
    checks = [c for c, _ in parts]
    benches: dict[str, dict] = {}
    for _, b in parts:
        for stem, data in b.items():
            benches[stem] = merge_bench(benches[stem], data) if stem in benches else data
    bars: dict[str, dict] = {}
    for c in checks:        # the check's bars, then those of the merged benchmarks run beside it
        for bar in c.get("bars", []):
            bars[bar["name"]] = bar                  # a later part's bar replaces an earlier one of that name
    for d in benches.values():
        for bar in d.get("bars", []):
            bars[bar["name"]] = bar
    check = {"date": " + ".join(str(c.get("date", "—")) for c in checks), "parts": len(checks),
             "code": [c.get("code") for c in checks],
             "quick": any(c.get("quick") for c in checks),
             "partial": all(c.get("partial") for c in checks),
             "doctor": next((c["doctor"] for c in checks if c.get("doctor")), []),
             "steps": {k: v for c in checks for k, v in c.get("steps", {}).items()},
             "bars": list(bars.values())}
    return check, benches


def _case(name: str) -> str:
    return name.split(": ", 1)[0]


def merge_bench(old: dict, new: dict) -> dict:
    """One benchmark run in two parts (a later run of some of its cases, `--only`): every row and bar of a
    case the later part ran (the name before ': ', or before ' vs ' for a bar) is the later part's; the
    other cases' stay, each row saying which run it is from. A later run under another title is a new
    version of the benchmark (it measures something else now): it replaces the earlier run whole."""
    if old.get("info", {}).get("title") != new.get("info", {}).get("title"):
        return new
    dates = (old.get("info", {}).get("date", "—"), new.get("info", {}).get("date", "—"))
    redone = {_case(r["name"]) for r in new.get("rows", [])}
    rows = [{**r, "run": r.get("run", dates[0])} for r in old.get("rows", []) if _case(r["name"]) not in redone]
    rows += [{**r, "run": r.get("run", dates[1])} for r in new.get("rows", [])]
    bars = {b["name"]: b for b in old.get("bars", []) if _case(b["name"].rsplit(" vs ", 1)[0]) not in redone}
    bars.update({b["name"]: b for b in new.get("bars", [])})
    info = {**{k: v for k, v in old.get("info", {}).items() if k != "partial"}, **new.get("info", {}),
            "date": " + ".join(dates)}       # partial: the later run stopped early (the earlier one's rows are whole)
    return {**old, **new, "info": info, "rows": rows, "bars": list(bars.values()),
            "missing": {**old.get("missing", {}), **new.get("missing", {})},
            "notes": list(dict.fromkeys(old.get("notes", []) + new.get("notes", [])))}


def machine(check: dict, benches: dict[str, dict]) -> list[str]:
    infos = [b.get("info", {}) for b in benches.values()]
    gpu = next((i for i in infos if i.get("gpu")), {})
    cc = gpu.get("cc")
    lines = ["## Machine", "",
             f"- GPU: {gpu.get('gpu', '—')}" + (f" (compute capability {cc[0]}.{cc[1]})" if cc else ""),
             f"- run: {check.get('date', '—')}{' (quick mode)' if check.get('quick') else ''}",
             f"- code: {code_line(check.get('code'))}",
             f"- Python (benchmarks): {next((i['python'] for i in infos if i.get('python')), '—')}", ""]
    doctor = check.get("doctor") or []
    if doctor:
        lines += ["Environment (`python -m bridge doctor`, same run):", "", "```", *doctor, "```", ""]
    return lines


def code_line(code: dict | list | str | None) -> str:
    """The code the check ran (gpu_check.py's fingerprint): one, or the parts' when they agree, else each.
    A folder of benchmark files run on their own (--partial) has no record, so the page says which parts
    those are rather than vouching for their code."""
    parts = code if isinstance(code, list) else [code]
    alone = [k + 1 for k, c in enumerate(parts) if c == ON_ITS_OWN]
    recorded = [(k, c) for k, c in enumerate(parts) if c != ON_ITS_OWN]
    note = (f"; part{'s' if len(alone) > 1 else ''} {', '.join(map(str, alone))}: benchmark files run on their "
            "own, with no gpu_check.py record of the code" if alone else "")
    if not recorded:
        return "not recorded (benchmark files run on their own)"
    if any(c is None for _, c in recorded):
        return "not recorded (a part ran before gpu_check.py fingerprinted the code)" + note
    marks = [(k, f"{c['sha256']} ({c['files']} files)") for k, c in recorded]
    if len({m for _, m in marks}) == 1:
        n = len(marks)
        same = ("" if n == 1 else f", the same in all {n} parts" if not alone
                else f", the same in the {n} parts that recorded it")
        return marks[0][1] + same + note
    return "DIFFERENT in the parts, so they are not one check: " + "; ".join(
        f"part {k + 1}: {m}" for k, m in marks) + note


def steps(check: dict) -> list[str]:
    rows = []
    for name, st in check.get("steps", {}).items():
        detail = st.get("note") or ", ".join(f"{k} {v}" for k, v in st.items()
                                             if k in ("passed", "failed", "errors", "api_errors", "skipped", "memcheck_errors",
                                                      "memcheck_rc"))
        if st.get("failed_tests"):
            detail += "; failed: " + ", ".join(t.rsplit(".", 1)[-1] for t in st["failed_tests"])
        if st.get("selection"):      # gpu_check.py --tests: a focused re-run, never the whole suite
            detail += f"; a SELECTION, not the whole suite: {', '.join(st['selection'])}"
        rows.append([name, st.get("rc"), st.get("seconds"), detail])
    coverage = suite_coverage(check.get("steps", {}))
    if coverage:
        rows.append(["tests (the suite)", None, None, coverage])
    return ["## Steps of the GPU check", "", *table(["step", "exit code", "seconds", "detail"], rows)]


def suite_coverage(steps: dict[str, dict]) -> str:
    """Which shards of the suite the parts hold ('tests i/n' steps, gpu_check.py --shard), or that they hold its
    GPU tests ('tests gpu', --gpu-tests); '' unsharded."""
    if "tests gpu" in steps:         # gpu_check.py --gpu-tests
        return "the suite's GPU tests (-m gpu) in one part; its CPU tests run in CI on every push"
    shards = [name.split(" ", 1)[1] for name in steps if name.startswith("tests ")]
    if not shards:
        return ""
    counts = {int(s.split("/")[1]) for s in shards}
    held = {int(s.split("/")[0]) for s in shards}
    if len(counts) == 1 and held == set(range(1, max(counts) + 1)):
        return f"the whole suite, in {max(counts)} shards of whole files"
    wanted = {f"{i}/{n}" for n in counts for i in range(1, n + 1)}
    return f"NOT the whole suite: shards {', '.join(sorted(shards))} ran, {', '.join(sorted(wanted - set(shards)))} did not"


def bars(check: dict) -> list[str]:
    rows = [[b["name"], b["ours"], b["peer"], b["ratio"], b["bar"], "PASS" if b.get("pass") else "FAIL"]
            for b in check.get("bars", [])]
    if not rows:
        return ["## Bars", "", "No bar was measured in this run.", ""]
    return ["## Bars (DESIGN §7)", "", *table(["measurement", "ours", "peer", "ratio", "bar", "result"], rows)]


def bench_section(stem: str, data: dict) -> list[str]:
    info = data.get("info", {})
    out = [f"### {info.get('title', stem)}", "", f"`benchmarks/{stem}.py`, {info.get('date', '')}", ""]
    if info.get("partial"):
        out += ["**Partial:** the run stopped before its end (killed from outside, e.g. by the check's time "
                "budget); these are the cases it finished.", ""]
    rows = data.get("rows", [])
    if rows:
        extra_keys = sorted({k for r in rows for k in r if k not in ("name", "value", "unit")})
        out += table(["measurement", "value", "unit", *extra_keys],
                     [[r["name"], r.get("value"), r.get("unit"), *(r.get(k) for k in extra_keys)] for r in rows])
    for name, why in data.get("missing", {}).items():
        out.append(f"- missing peer `{name}`: {why}")
    for note in data.get("notes", []):
        out.append(f"- note: {note}")
    return out + [""]


def render(check: dict, benches: dict[str, dict], image: bool,
           install: tuple[dict, str] | None = None) -> str:
    source = ("benchmark JSON files run on their own (**partial**: not a full `scripts/gpu_check.py` run; "
              "benchmarks without a section here have not run on a GPU yet)" if check.get("partial")
              else f"the JSON files of a `scripts/gpu_check.py` run in {check['parts']} parts (one device call "
                   "each, dated below; a benchmark from a later part replaces an earlier one)"
              if check.get("parts") else "the JSON files of one `scripts/gpu_check.py` run")
    lines = ["# Benchmarks", "",
             f"Generated by `benchmarks/write_docs.py` from {source}; do not edit by hand. Ours and the peers "
             "are measured in the same process on the same GPU.", ""]
    lines += machine(check, benches)
    all_bars = check.get("bars") or [b for d in benches.values() for b in d.get("bars", [])]
    verdict = all(b.get("pass") for b in all_bars)
    lines += [f"Bars: {'all pass' if verdict else 'some FAIL'} "
              f"({sum(1 for b in all_bars if b.get('pass'))}/{len(all_bars)}).", ""]
    if image:
        lines += ["![benchmarks](benchmarks.png)", ""]
    if check.get("partial"):
        check = dict(check, bars=[b for d in benches.values() for b in d.get("bars", [])])
        lines += bars(check) + ["## Results", ""]
    else:
        lines += bars(check) + steps(check) + ["## Results", ""]
    for stem in sorted(benches, key=lambda s: (ORDER.index(s) if s in ORDER else len(ORDER), s)):
        lines += bench_section(stem, benches[stem])
    if install is not None:
        lines += install_section(*install)
    return "\n".join(lines).rstrip() + "\n"


def load_install(path: Path) -> dict:
    """A benchmarks/install_time.py record; any other file, or a dry run, is refused (ValueError)."""
    record = json.loads(path.read_text())
    if not isinstance(record, dict) or record.get("kind") != "cpu_install":
        raise ValueError(f"--install-record: {path} is not a benchmarks/install_time.py record")
    if record.get("dry_run"):
        raise ValueError(f"--install-record: {path} is a dry run: nothing in it was measured")
    return record


def _install_note(step: dict) -> str:
    notes = [step.get("note") or ""]
    if "cpp_kernels_built" in step:
        notes.append(f"nvcc: {step.get('nvcc') or 'none'}; C++ kernels "
                     f"{'built' if step['cpp_kernels_built'] else 'skipped'}")
    notes.append(step.get("summary") or "")
    return "; ".join(n for n in notes if n)


def install_section(record: dict, source: str) -> list[str]:
    """Issue 31's install and test-time bars, from one run of benchmarks/install_time.py."""
    m = record.get("machine", {})
    steps = [s for s in record.get("steps", []) if s.get("pass") is not None]
    lines = ["## Install and test times (CPU machine, no GPU)", "",
             f"`benchmarks/install_time.py`, {record.get('date', '—')} (`{source}`): {m.get('cores', '—')} cores, "
             f"commit {m.get('commit', '—')}{' with uncommitted changes' if m.get('uncommitted_changes') else ''}; "
             f"Python {m.get('python', '—')}, {m.get('pip', '—')}, {m.get('cmake', '—')}, {m.get('cxx', '—')}. "
             "Wall seconds of each whole command, run from the checkout; cold = the build folder removed first.", "",
             f"- load before: `{record.get('uptime_before', '—')}`",
             f"- load after: `{record.get('uptime_after', '—')}`", ""]
    rows = [[s["title"], f"`{s['command']}`", s["seconds"], f"≤ {s['bar_s']:g}", "PASS" if s["pass"] else "FAIL",
             f"{s['load_before'][0]:.2f} → {s.get('load_after', ['—'])[0]}", _install_note(s)] for s in steps]
    lines += table(["step", "command", "seconds", "bar (s)", "result", "load, 1 min (before → after)", "note"], rows)
    lines += [f"Install bars: {'all pass' if all(s['pass'] for s in steps) else 'some FAIL'} "
              f"({sum(1 for s in steps if s['pass'])}/{len(steps)}).", ""]
    if not record.get("restored", True):
        lines += [f"- note: the editable install was not restored after the run: {record.get('restore_check')}", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", nargs="+", default=["results"],
                    help="result folders of one check (several: the parts of a split run, merged)")
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--partial", action="store_true",
                    help="render benchmark JSONs run on their own (no gpu_check.json); the page says so")
    ap.add_argument("--install-record", help="a benchmarks/install_time.py JSON record, or 'none' (default: the "
                    "newest results/cpu_install_*.json beside --out)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    try:
        check, benches = merge([load(Path(r), args.partial) for r in args.results])
        record_path = (None if args.install_record == "none" else Path(args.install_record) if args.install_record
                       else max((out.parent / "results").glob("cpu_install_*.json"), default=None))
        install = (load_install(record_path), record_path.as_posix()) if record_path else None
    except (FileNotFoundError, json.JSONDecodeError, ValueError) as exc:
        print(f"write_docs: {exc}", file=sys.stderr)
        return 2
    if not any(b.get("info", {}).get("gpu") for b in benches.values()):
        print(f"write_docs: no benchmark file in {args.results}/ reports a GPU; the page only shows numbers "
              f"from a real GPU run", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(check, benches, (out.parent / "benchmarks.png").exists(), install))
    print(f"wrote {out} from {len(benches)} benchmark file(s)" + (f" and {install[1]}" if install else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
