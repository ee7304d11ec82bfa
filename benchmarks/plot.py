"""Draw docs/benchmarks.png from the benchmark JSON files of a GPU check run (results/*.json).

    python benchmarks/plot.py [--results results] [--out docs/benchmarks.png]

Panels: bandwidth (GB/s) of the elementwise add, row softmax and full sum next to their peers; host
launch overhead (µs) next to the peers; SIMT parity (DSL time / C++ time per kernel); GEMM TFLOP/s.
Only numbers found in the JSON files are drawn; a panel without data says so.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OURS_PREFIXES = ("DSL", "bridge")


def load_results(folder: Path) -> dict[str, dict]:
    """Benchmark JSONs by file stem (gpu_check.json, which has no rows, is skipped)."""
    out = {}
    for p in sorted(folder.glob("*.json")):
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            print(f"plot: skipping {p}: not JSON ({exc})", file=sys.stderr)
            continue
        if isinstance(data, dict) and "rows" in data:
            out[p.stem] = data
    return out


def is_ours(name: str) -> bool:
    return any(name.split(": ")[-1].startswith(p) for p in OURS_PREFIXES)


def rows_with_unit(results: dict[str, dict], stem: str, unit: str) -> list[tuple[str, float]]:
    rows = results.get(stem, {}).get("rows", [])
    return [(r["name"], float(r["value"])) for r in rows if r.get("unit") == unit and r.get("value") is not None]


def parity_ratios(results: dict[str, dict]) -> list[tuple[str, float]]:
    """DSL time / C++ time per kernel, from the simt_parity rows."""
    rows = {r["name"]: r["value"] for r in results.get("simt_parity", {}).get("rows", []) if r.get("value")}
    out = []
    for name, v in rows.items():
        if name.endswith(" [DSL]"):
            kernel = name[: -len(" [DSL]")]
            cpp = rows.get(f"{kernel} [C++ nvcc -O3]")
            if cpp:
                out.append((kernel, float(v) / float(cpp)))
    return out


def hbars(ax, data: list[tuple[str, float]], title: str, xlabel: str, ref: float | None = None) -> None:
    """Horizontal bars, ours highlighted, value printed at the end of each bar."""
    ax.set_title(title, fontsize=10)
    if not data:
        ax.text(0.5, 0.5, "no data in the results", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    names = [n for n, _ in data]
    vals = [v for _, v in data]
    colors = ["tab:blue" if is_ours(n) else "tab:gray" for n in names]
    y = list(range(len(data)))[::-1]
    ax.barh(y, vals, color=colors)
    ax.set_yticks(y)
    ax.set_yticklabels([n if len(n) <= 48 else n[:45] + "..." for n in names], fontsize=7)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    top = max(vals)
    for yi, v in zip(y, vals):
        ax.text(v + top * 0.01, yi, f"{v:.4g}", va="center", fontsize=6)
    ax.set_xlim(0, top * 1.18)
    if ref is not None:
        ax.axvline(ref, color="tab:red", lw=0.8, ls="--")


def plot(results: dict[str, dict], out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bandwidth = ([(f"add 2^28 f32: {n}", v) for n, v in rows_with_unit(results, "elementwise", "GB/s")] +
                 rows_with_unit(results, "tile_ops", "GB/s"))
    launch = rows_with_unit(results, "launch_overhead", "us")
    gemm = rows_with_unit(results, "tile_ops", "TFLOP/s")
    fig, axes = plt.subplots(2, 2, figsize=(15, 10))
    gpu = next((d["info"].get("gpu") for d in results.values() if d.get("info", {}).get("gpu")), "no GPU")
    date = next((d["info"].get("date") for d in results.values() if d.get("info", {}).get("date")), "")
    fig.suptitle(f"kernelbridge benchmarks on {gpu} ({date}); blue = ours, gray = peers", fontsize=11)
    hbars(axes[0][0], bandwidth, "memory bandwidth (higher is better)", "GB/s")
    hbars(axes[0][1], launch, "host launch overhead (lower is better)", "µs per launch")
    hbars(axes[1][0], [(f"DSL {k}", v) for k, v in parity_ratios(results)],
          "SIMT parity: DSL time / CUDA C++ time (left of the red line passes)", "ratio", ref=1 / 0.98)
    hbars(axes[1][1], gemm, "GEMM 8192^3, f32 accumulate (higher is better)", "TFLOP/s")
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results", help="folder with the benchmark JSON files")
    ap.add_argument("--out", default="docs/benchmarks.png")
    args = ap.parse_args(argv)
    results = load_results(Path(args.results))
    if not results:
        print(f"plot: no benchmark JSON files in {args.results}/ (run scripts/gpu_check.py first)",
              file=sys.stderr)
        return 2
    plot(results, Path(args.out))
    print(f"wrote {args.out} from {', '.join(sorted(results))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
