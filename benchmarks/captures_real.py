"""Every real capture at once: plain `voxnerf train` (the preset it picks, no overrides), 2 threads, 300 s, on every
capture in a folder, plus NeRF-Synthetic lego_100; one table.

Rows of one LLFF-style capture (folders of links under --out; nothing is copied):
- a capture without masks is one row, trained as a user brings it, in the layout voxnerf detects for it (flower:
  forward, LLFF's own sweep and NeRF's test split; beer: unbounded, a phone video around a can)
- a capture with masks (an object capture) is three rows:
  object     the capture as it is, with its masks: an object capture in box space
  unbounded  without its masks: a 360-degree capture of an unbounded scene (contract space)
  forward    the largest forward-facing sweep (NDC space) of a photo and the photos within FORWARD_DEGREES of its
             view direction, where that sweep holds at least FORWARD_TEST_VIEWS test views (a slice scored on one
             or two views says little)
and `synthetic`: lego_100 (white background, all 200 test views). Not in the table unless --layouts names it:
  unbounded-json  each unbounded row written as a nerfstudio / instant-ngp transforms.json (photos linked): the
                  same photos and poses without the per-view near bounds poses_bounds.npy carries, as captures from
                  instant-ngp, nerfstudio and COLMAP folders without sparse points come

Per row: test PSNR and SSIM at the end of training, training rays/s and samples per ray (medians over the second
half of training), peak RSS of the run's process, wall time of the whole run (loading, training, scoring); then the
mean of each layout and of all rows.

Arms side by side, each row's arms one after the other (so the machine's drift hits both):
  today       the working tree as it is
  before      --before REV (an earlier commit, in a temporary worktree) and/or --before-set KEY=VALUE (overrides
              that restore an earlier preset); it is then the reference that today is judged against
  try         --try 'KEY=VALUE[; KEY=VALUE ...]' (repeatable, an arm each): today's tree with those overrides,
              judged against today (a screening of a change)

The rule (benchmarks/RESULTS.md): a preset or default change is kept only if it raises the mean of its layout's rows
and lowers no row by more than 0.2 dB. Rows whose difference is under --close dB (0.3) run a second time in each
arm and their medians count; the verdict per layout is printed under the table.

    python benchmarks/captures_real.py                                  # the whole table (about an hour on 2 cores)
    python benchmarks/captures_real.py --layouts unbounded --budget 120 --captures ethiopianHead_8
    python benchmarks/captures_real.py --layouts unbounded --try contract_inner=0.5 --try render.step_ratio=0.5
    python benchmarks/captures_real.py --before HEAD~1                  # an earlier commit side by side
    python benchmarks/captures_real.py --layouts object --before-set optim.distortion_weight=0
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from machine import cpu_name
from revisions import checkout

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
LAYOUTS = ("object", "unbounded", "forward", "synthetic", "unbounded-json")
TABLE_LAYOUTS = LAYOUTS[:4]  # the whole table's (an hour on 2 cores)
SYNTHETIC = DATA / "nerf_synthetic" / "lego_100"
FORWARD_DEGREES = 20.0
FORWARD_TEST_VIEWS = 3  # the fewest test views (every 8th photo) a forward slice of a masked capture is scored on
KEEP_WORST_ROW = -0.2  # dB: the rule's floor for any row of the layout
BARS = {"rays_per_s": 10e3, "samples_per_ray": 48.0, "peak_rss_gb": 2.0}  # the floors and ceilings of a row


def link_variant(capture: Path, layout: str, root: Path) -> Path:
    """The folder a layout trains on: the capture itself, or a folder of links to its parts."""
    if layout == "object":
        return capture
    out = root / "scenes" / f"{capture.name}_{layout}"
    if layout == "unbounded":
        if not out.exists():
            out.mkdir(parents=True)
            for entry in capture.iterdir():
                if entry.name.lower() != "masks":
                    (out / entry.name).symlink_to(entry.resolve())
        return out
    from voxnerf.data.files import list_images

    poses = np.load(capture / "poses_bounds.npy")
    keep = forward_sweep(capture)
    if out.exists():
        if (out / "poses_bounds.npy").is_file() and np.array_equal(np.load(out / "poses_bounds.npy"), poses[keep]):
            return out
        remove_sweep(out)  # a sweep chosen by an earlier rule, or one left half built
    out.mkdir(parents=True)
    np.save(out / "poses_bounds.npy", poses[keep])
    (out / "images").mkdir()
    for image, kept in zip(list_images(capture / "images"), keep):  # the photos load_scene pairs with the poses
        if kept:
            (out / "images" / image.name).symlink_to(image.resolve())
    return out


def json_variant(scene_dir: Path, name: str, root: Path) -> Path:
    """A folder holding `scene_dir`'s photos (links) and cameras as transforms.json, without per-view near bounds."""
    from voxnerf.data import load_scene
    from voxnerf.data.files import list_images
    from voxnerf.data.formats.nerfstudio import nerfstudio_camera
    from voxnerf.data.formats.writing import opengl_matrix, save_json

    out = root / "scenes" / f"{name}_unbounded-json"
    if (out / "transforms.json").is_file():
        return out
    scene = load_scene(scene_dir, with_images=False)
    (out / "images").mkdir(parents=True, exist_ok=True)
    frames = []
    for i, image in enumerate(list_images(scene_dir / "images")):  # the photos load_scene pairs with the poses
        if not (out / "images" / image.name).is_symlink():
            (out / "images" / image.name).symlink_to(image.resolve())
        frames.append({"file_path": f"images/{image.name}", "transform_matrix": opengl_matrix(scene.cameras, i),
                       **nerfstudio_camera(scene.cameras, i)})
    splits = {f"{split}_filenames": [frames[i]["file_path"] for i in index] for split, index in scene.splits.items()}
    save_json(out / "transforms.json", {"camera_model": "OPENCV", "frames": frames, **splits})
    return out


def remove_sweep(folder: Path) -> None:
    """Delete a forward layout's folder that this script built (poses_bounds.npy and links to photos), and nothing
    else: a folder holding any other file stops the benchmark with a message."""
    built = {folder / "poses_bounds.npy", folder / "images"}
    others = [p for p in folder.rglob("*") if p not in built and not p.is_symlink()]
    if others:
        sys.exit(f"{folder}: holds files this benchmark did not make ({others[0].name}); move them or pick another --out")
    shutil.rmtree(folder)


def forward_sweep(capture: Path) -> np.ndarray:
    """(N,) bool over the capture's photos (poses_bounds.npy order): the largest set of a photo and the photos
    within FORWARD_DEGREES of its view that voxnerf itself calls forward-facing (voxnerf.data.layout; ties: the
    set around the photo whose neighbours look most its way). Around the middle photo instead, moldGoldCape_8's
    sweep held 7 photos (1 test view); the largest sets of neighbours alone are not always forward-facing (their
    cameras spread too far for their depth) and would train with the 360 preset."""
    from voxnerf.data import load_scene
    from voxnerf.data.layout import is_forward_facing

    cameras = load_scene(capture, with_images=False).cameras
    cosines = cameras.forward @ cameras.forward.T
    near = cosines >= np.cos(np.radians(FORWARD_DEGREES))
    candidates = [(near[c].sum(), (cosines[c] * near[c]).sum(), c) for c in range(len(near))
                  if is_forward_facing(cameras.subset(np.nonzero(near[c])[0]))]
    if not candidates:
        sys.exit(f"{capture}: no photo and its neighbours within {FORWARD_DEGREES:.0f} deg are forward-facing")
    return near[max(candidates)[2]]


def run_one(scene_dir: Path, out: Path, budget: float, threads: int, sets: list[str]) -> dict:
    """Train with the auto-picked preset (and `sets`) in this process, as `voxnerf train` does, and measure."""
    from voxnerf.data import load_scene
    from voxnerf.train.presets import preset_for
    from voxnerf.train.session import train_run

    preset, overlays, _ = preset_for(load_scene(scene_dir, with_images=False))
    start = time.perf_counter()
    outcome = train_run(scene_dir, None, out, overwrite=True, device="cpu", max_time=budget, threads=threads,
                        quiet=True, sets=sets)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    late = [r for r in rows if r["time"] >= budget / 2]
    mean = outcome.scores["mean"]
    return {"preset": " + ".join([preset, *overlays]), "steps": outcome.steps, "psnr": mean["psnr"],
            "ssim": mean["ssim"], "samples_per_ray": float(np.median([r["samples_per_ray"] for r in late])),
            "rays_per_s": float(np.median([r["rays_per_s"] for r in late])), "wall_s": wall,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9}


@dataclass
class Arm:
    """One way of training every row: code from `tree` (None: the working tree) with `sets` over the preset."""

    name: str
    sets: list[str]
    revision: str | None = None
    tree: Path | None = None


@dataclass
class Row:
    """One capture in one layout (or lego_100), and its runs in each arm."""

    capture: str
    layout: str
    scene_dir: Path
    runs: dict[str, list[dict]] = field(default_factory=dict)

    def median(self, arm: str, key: str) -> float:
        return float(statistics.median(r[key] for r in self.runs[arm]))


def find_rows(captures: Path, names: list[str], layouts: list[str], root: Path) -> list[Row]:
    """Every capture folder (with poses_bounds.npy) under `captures` (or `captures` itself), in each of its layouts
    (`capture_layouts`) that `layouts` names, and its unbounded row as transforms.json where they name
    unbounded-json (`json_variant`)."""
    if (captures / "poses_bounds.npy").is_file():
        found = [captures]
    else:
        found = sorted(p for p in captures.iterdir() if (p / "poses_bounds.npy").is_file())
    if names:
        found = [p for p in found if p.name in names]
    rows = []
    for capture in (p.resolve() for p in found):
        for layout, scene_dir in capture_layouts(capture, root):
            if layout in layouts:
                rows.append(Row(capture.name, layout, scene_dir))
            if layout == "unbounded" and "unbounded-json" in layouts:
                rows.append(Row(capture.name, "unbounded-json", json_variant(scene_dir, capture.name, root)))
    if "synthetic" in layouts and (not names or SYNTHETIC.name in names):
        rows.append(Row(SYNTHETIC.name, "synthetic", SYNTHETIC))
    return rows


def capture_layouts(capture: Path, root: Path) -> list[tuple[str, Path]]:
    """(layout, folder to train) of each row of `capture`: a masked capture as an object, without its masks and as
    its forward sweep (where it holds FORWARD_TEST_VIEWS test views); a capture without masks as it is, in the layout
    voxnerf detects for it."""
    if not (capture / "masks").is_dir():
        from voxnerf.data import load_scene
        from voxnerf.data.layout import detect_layout

        return [(detect_layout(load_scene(capture, with_images=False)), capture)]
    rows = [(layout, link_variant(capture, layout, root)) for layout in ("object", "unbounded")]
    if len(range(0, int(forward_sweep(capture).sum()), 8)) >= FORWARD_TEST_VIEWS:
        rows.append(("forward", link_variant(capture, "forward", root)))
    return rows


def train(row: Row, arm: Arm, args: argparse.Namespace, index: int) -> dict:
    """One run of `row` in `arm`, in its own process (its peak RSS is its own), with the arm's code."""
    env = dict(os.environ)
    if arm.tree is not None:  # the earlier commit's voxnerf comes first on the path
        env["PYTHONPATH"] = os.pathsep.join([str(arm.tree), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, __file__, "--one", str(row.scene_dir), "--out", str(args.out / f"run_{index}"),
           "--budget", str(args.budget), "--threads", str(args.threads), *[f"--set={s}" for s in arm.sets]]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode:
        sys.exit(f"{row.capture} {row.layout} ({arm.name}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_rows(rows: list[Row], arms: list[Arm], args: argparse.Namespace, log: Path) -> None:
    """Each row in each arm once, then (--close) a second run of both arms where they differ by less."""
    count = 0

    def go(row: Row, arm: Arm) -> None:
        nonlocal count
        result = train(row, arm, args, count)
        count += 1
        row.runs.setdefault(arm.name, []).append(result)
        with log.open("a") as f:
            f.write(json.dumps({"capture": row.capture, "layout": row.layout, "arm": arm.name, **result}) + "\n")
        print(f"{row.capture} {row.layout} [{arm.name}]: {result['psnr']:.2f} dB, "
              f"{result['rays_per_s'] / 1e3:.1f}k rays/s, {result['wall_s']:.0f} s", file=sys.stderr, flush=True)

    for _ in range(args.repeats):
        for row in rows:
            for arm in arms:
                go(row, arm)
    if len(arms) < 2 or args.close <= 0:
        return
    reference = arms[0]
    for row in rows:
        close = [arm for arm in arms[1:] if abs(row.median(arm.name, "psnr") - row.median(reference.name, "psnr"))
                 < args.close and len(row.runs[arm.name]) < 2]
        for arm in [reference, *close] if close else []:
            go(row, arm)


def table(rows: list[Row], arms: list[Arm]) -> str:
    """Every row in every arm (medians of its runs), then each layout's mean and the mean of all rows."""
    head = "| capture | layout | arm | PSNR | SSIM | rays/s | samples/ray | peak RSS | wall | runs |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        for arm in arms:
            m = {key: row.median(arm.name, key) for key, v in row.runs[arm.name][0].items() if isinstance(v, float)}
            missed = [key for key, bar in BARS.items() if (m[key] < bar if key == "rays_per_s" else m[key] > bar)]
            note = f" (misses {', '.join(missed)})" if missed else ""
            lines.append(f"| {row.capture} | {row.layout} | {arm.name} | {m['psnr']:.2f} | {m['ssim']:.3f} | "
                         f"{m['rays_per_s'] / 1e3:.1f}k | {m['samples_per_ray']:.1f} | {m['peak_rss_gb']:.2f} GB | "
                         f"{m['wall_s']:.0f} s | {len(row.runs[arm.name])}{note} |")
    lines += ["", "| layout | rows | " + " | ".join(f"mean PSNR {a.name}" for a in arms) + " |",
              "|---|---|" + "---|" * len(arms)]
    groups = [(layout, [r for r in rows if r.layout == layout]) for layout in LAYOUTS] + [("all", rows)]
    for layout, members in groups:
        if members:
            means = [statistics.fmean(r.median(a.name, "psnr") for r in members) for a in arms]
            lines.append(f"| {layout} | {len(members)} | " + " | ".join(f"{v:.2f}" for v in means) + " |")
    return "\n".join(lines)


def verdicts(rows: list[Row], arms: list[Arm]) -> str:
    """The rule per layout for every arm against the reference (the first arm): keep or drop, and why."""
    lines = []
    reference = arms[0]
    for arm in arms[1:]:
        for layout in LAYOUTS:
            members = [r for r in rows if r.layout == layout]
            if not members:
                continue
            deltas = {r.capture: r.median(arm.name, "psnr") - r.median(reference.name, "psnr") for r in members}
            mean, worst = statistics.fmean(deltas.values()), min(deltas.values())
            keep = mean > 0 and worst >= KEEP_WORST_ROW
            each = ", ".join(f"{name} {d:+.2f}" for name, d in deltas.items())
            lines.append(f"{arm.name} vs {reference.name}, {layout}: mean {mean:+.2f} dB, worst row {worst:+.2f} "
                         f"({each}) -> {'keep' if keep else 'drop'}")
    return "\n".join(lines)


def make_arms(args: argparse.Namespace) -> list[Arm]:
    arms = []
    if args.before or args.before_set:
        arms.append(Arm("before", args.before_set, args.before))
    arms.append(Arm("today", []))
    for sets in args.try_sets:
        arms.append(Arm(sets, [s.strip() for s in sets.split(";") if s.strip()]))
    return arms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("captures", type=Path, nargs="?", default=DATA / "captures",
                        help="a folder of captures, or one capture")
    parser.add_argument("--captures", dest="names", default="", help="only these captures (names, comma-separated)")
    parser.add_argument("--layouts", default=",".join(TABLE_LAYOUTS), help=f"some of {', '.join(LAYOUTS)}")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds of training per run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench_runs" / "captures_real")
    parser.add_argument("--before", help="an earlier commit to train side by side (the reference)")
    parser.add_argument("--before-set", action="append", default=[], help="an override restoring an earlier preset")
    parser.add_argument("--try", dest="try_sets", action="append", default=[],
                        help="overrides to screen, ';' between them (an arm each)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each row in each arm (medians count)")
    parser.add_argument("--close", type=float, default=0.3, help="a second run where the arms differ by less (dB)")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--set", dest="sets", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.out, args.budget, args.threads, args.sets)))
        return
    layouts = [name for name in args.layouts.split(",") if name]
    unknown = set(layouts) - set(LAYOUTS)
    if unknown:
        sys.exit(f"--layouts: unknown {', '.join(sorted(unknown))} (expected some of {', '.join(LAYOUTS)})")
    if not args.captures.is_dir():
        sys.exit(f"{args.captures}: no such folder of captures")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = find_rows(args.captures, [n for n in args.names.split(",") if n], layouts, args.out)
    if not rows:
        sys.exit(f"{args.captures}: no capture (a folder with poses_bounds.npy) matches")
    arms = make_arms(args)
    log = args.out / f"runs_{time.strftime('%Y%m%d_%H%M%S')}.jsonl"
    with ExitStack() as stack:
        for arm in arms:
            if arm.revision:
                arm.tree = stack.enter_context(checkout(arm.revision))
        run_rows(rows, arms, args, log)
    from voxnerf.system.device import cpu_has_fast_bf16

    bf16 = "native bf16" if cpu_has_fast_bf16() else "no native bf16 (fp32)"
    print(f"{cpu_name()}, {bf16}, {args.threads} threads, {args.budget:g} s a run; runs in {log}")
    print(table(rows, arms))
    if len(arms) > 1:
        print()
        print(verdicts(rows, arms))


if __name__ == "__main__":
    main()
