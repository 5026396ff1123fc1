#!/usr/bin/env python3
"""A measured step beside its estimate, by kernel family, and calibration from it.

`mtrun --profile` lists a step's device time by family (a plan opcode, or a part of the
step: zero gradients, gradient norm, optimizer, gradient sync); `mtc estimate --json`
gives the same families for the same plan, with the FLOPs and bytes of each.

  families.py compare PROFILE.log ESTIMATE.json [--runs-must-match] [--within PCT]
      prints both side by side, with the estimate's error per family and for the step;
      --runs-must-match exits 1 unless every family has as many runs in both, --within
      unless every family the profile times at --min-ms or more is estimated within PCT%,
      --device-within unless the device time (the families' sum) is.
  families.py diff BEFORE.log AFTER.log
      one plan's profiles before and after a change (or on two devices): each family's
      runs and ms per step in both, the change in ms and in percent, largest first,
      and the device time's.
  families.py calibrate PROFILE.log ESTIMATE.json [PROFILE.log ESTIMATE.json ...]
                        --system BASE.json --source TEXT -o OUT [--eager-step-seconds S]
      writes BASE with a `kernels` section, each family's run costed as a fixed time
      (`overhead_us`) plus, for families of matrix products (linears, fused attention),
      the model's time (measured products, or tiles and waves) over an `efficiency`, and
      for the rest the bytes moved over a rate (`gbs`); each with TEXT as its source.
      The two are fitted to the family's runs in every profile given (least squares in
      relative error); from one profile, or where the fit finds no fixed time, that is
      none and the rate is the one the profiles' time gives. Each ESTIMATE must come
      from BASE as it is (its families not yet calibrated), for the plan its PROFILE
      ran. Families a profile times below --min-ms per step are left out of it (their
      time is mostly rounding). With the first profile's step time when run kernel by
      kernel (S), a `runtime` section too: CUDA graphs, as mtrun records them, and the
      host's gap per launch g, for which each launch taking max(its kernel, g) makes
      the step S. Collectives and the gradient sync are left to the links.
"""
import argparse
import json
import re
import sys

ROW = re.compile(r"^\s+(\S.*?)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)%(?:\s+([0-9.]+))?\s*$")


def read_profile(path, total=None):
    """{family: (runs, seconds)} from the first profile table of an mtrun log; `total`,
    a list, receives the table's total (runs, seconds)."""
    families, inside = {}, False
    with open(path) as f:
        for line in f:
            if "opcode or part" in line:
                inside = True
                continue
            if not inside:
                continue
            m = ROW.match(line)
            if not m:
                continue
            name = m.group(1)
            if name == "total":
                if total is not None:
                    total.extend((int(m.group(2)), float(m.group(3)) / 1e3))
                break
            families[name] = (int(m.group(2)), float(m.group(3)) / 1e3)
    if not families:
        sys.exit(f"families.py: {path}: no mtrun --profile table")
    return families


def read_estimate(path):
    """The estimate's object, and {family: {runs, seconds, flops, bytes}}."""
    with open(path) as f:
        estimate = json.load(f)
    if "families" not in estimate:
        sys.exit(f"families.py: {path}: not mtc estimate --json output")
    return estimate, estimate["families"]


def compare(args):
    profile = read_profile(args.profile)
    estimate, families = read_estimate(args.estimate)
    names = sorted(set(profile) | set(families),
                   key=lambda n: -max(profile.get(n, (0, 0))[1],
                                      families.get(n, {}).get("seconds", 0)))
    print(f"  {'opcode or part':26} {'runs':>6} {'est.':>6} {'ms/step':>9} {'est. ms':>9} "
          f"{'error':>8}")
    mismatched, wrong = [], []
    for name in names:
        runs, seconds = profile.get(name, (0, 0.0))
        e = families.get(name, {"runs": 0, "seconds": 0.0})
        error = f"{100 * (e['seconds'] - seconds) / seconds:+.1f}%" if seconds > 0 else ""
        print(f"  {name:26} {runs:6d} {e['runs']:6.0f} {seconds * 1e3:9.3f} "
              f"{e['seconds'] * 1e3:9.3f} {error:>8}")
        if runs != round(e["runs"]):
            mismatched.append(f"{name} ({runs} measured, {e['runs']:.0f} estimated)")
        costed = e.get("flops", 0) > 0 or e.get("bytes", 0) > 0
        if (args.within is not None and costed and seconds * 1e3 >= args.min_ms and
                abs(e["seconds"] - seconds) > args.within / 100 * seconds):
            wrong.append(f"{name} ({error}, beyond {args.within}%)")
    device = sum(s for _, s in profile.values())
    estimated = sum(f["seconds"] for f in families.values())
    print(f"  {'device time':26} {'':6} {'':6} {device * 1e3:9.3f} {estimated * 1e3:9.3f} "
          f"{100 * (estimated - device) / device:+7.1f}%")
    print(f"  estimated step {estimate['iteration_seconds'] * 1e3:.3f} ms "
          f"(host gaps {estimate['parts']['host_gaps'] * 1e3:.3f} ms)")
    if (args.device_within is not None and
            abs(estimated - device) > args.device_within / 100 * device):
        wrong.append(f"the device time ({100 * (estimated - device) / device:+.1f}%, "
                     f"beyond {args.device_within}%)")
    if args.runs_must_match and mismatched:
        sys.exit("families.py: runs differ: " + "; ".join(mismatched))
    if wrong:
        sys.exit("families.py: estimated beyond the bounds: " + "; ".join(wrong))


def diff(args):
    before, after = read_profile(args.before), read_profile(args.after)
    names = sorted(set(before) | set(after),
                   key=lambda n: -abs(after.get(n, (0, 0.0))[1] - before.get(n, (0, 0.0))[1]))
    print(f"  {'opcode or part':26} {'runs':>6} {'after':>6} {'ms/step':>9} {'after ms':>9} "
          f"{'change':>9} {'':>8}")
    for name in names:
        (runs, old), (new_runs, new) = before.get(name, (0, 0.0)), after.get(name, (0, 0.0))
        percent = f"{100 * (new - old) / old:+.1f}%" if old > 0 else ""
        print(f"  {name:26} {runs:6d} {new_runs:6d} {old * 1e3:9.3f} {new * 1e3:9.3f} "
              f"{(new - old) * 1e3:+9.3f} {percent:>8}")
    old, new = sum(s for _, s in before.values()), sum(s for _, s in after.values())
    print(f"  {'device time':26} {'':6} {'':6} {old * 1e3:9.3f} {new * 1e3:9.3f} "
          f"{(new - old) * 1e3:+9.3f} {100 * (new - old) / old:+7.1f}%")


# Families costed otherwise: collectives by the links, the gradient sync by its parts.
UNCALIBRATED = {"AllReduce", "AllGather", "ReduceScatter", "gradient sync"}


def launch_gap(profile, step):
    """The host's gap per launch g for which the step, each launch taking as long as its
    kernel or g, whichever is longer (a family's runs taken as alike), lasts `step`."""
    def step_with(gap):
        return sum(runs * max(seconds / runs, gap) for runs, seconds in profile.values() if runs)
    low, high = 0.0, step
    if step_with(low) >= step:
        return 0.0
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if step_with(mid) < step else (low, mid)
    return (low + high) / 2


def fit(points, name=""):
    """(fixed seconds per run t, seconds per unit c) for which runs·t + c·x best gives
    each point's (runs, x, seconds), in relative error; t = 0 where one point is given
    or the fit would make t or c negative (said on stderr for `name`)."""
    w = [1 / y for _, _, y in points]
    rr = sum((wi * r) ** 2 for wi, (r, _, _) in zip(w, points))
    rx = sum(wi * wi * r * x for wi, (r, x, _) in zip(w, points))
    xx = sum((wi * x) ** 2 for wi, (_, x, _) in zip(w, points))
    ry = sum(wi * wi * r * y for wi, (r, _, y) in zip(w, points))
    xy = sum(wi * wi * x * y for wi, (_, x, y) in zip(w, points))
    det = rr * xx - rx * rx
    if len(points) > 1 and det > 1e-9 * rr * xx:
        t, c = (ry * xx - rx * xy) / det, (rr * xy - rx * ry) / det
        if t >= 0 and c > 0:
            return t, c
        print(f"families.py: {name}: no fixed time fits its runs (t {t * 1e6:.3g} us, "
              f"c {c:.3g}): a rate alone", file=sys.stderr)
    return 0.0, xy / xx


def calibrate(args):
    if len(args.pairs) % 2:
        sys.exit("families.py calibrate: give each PROFILE with its ESTIMATE")
    total, points, kinds = [], {}, {}
    for i in range(0, len(args.pairs), 2):
        profile = read_profile(args.pairs[i], total if i == 0 else None)
        _, families = read_estimate(args.pairs[i + 1])
        if i == 0:
            first = profile
        for name, (runs, seconds) in profile.items():
            e = families.get(name)
            if (e is None or name in UNCALIBRATED or seconds * 1e3 < args.min_ms or
                    runs != round(e["runs"])):
                continue
            # Products: the model's time (its tiles and waves kept); the rest: bytes.
            kind = "efficiency" if e["flops"] > 0 else "gbs" if e["bytes"] > 0 else None
            if kind:
                kinds[name] = kind
                points.setdefault(name, []).append(
                    (runs, e["seconds"] if kind == "efficiency" else e["bytes"], seconds))
    with open(args.system) as f:
        system = json.load(f)
    kernels = system.setdefault("kernels", {})
    sources = system.setdefault("sources", {})
    for name in sorted(points):
        fixed, per = fit(points[name], name)
        rate = 1 / per if kinds[name] == "efficiency" else 1 / per / 1e9
        kernels[name] = {kinds[name]: float(f"{rate:.6g}")}
        if fixed > 0:
            kernels[name]["overhead_us"] = float(f"{fixed * 1e6:.6g}")
        sources[f"kernels.{name}"] = args.source
    if args.eager_step_seconds is not None:
        profile = first
        launches, device = total
        gap = launch_gap(profile, args.eager_step_seconds)
        system["runtime"] = {"name": "mtrun, calibrated", "cuda_graphs": True,
                             "launch_gap_us": float(f"{gap * 1e6:.4g}")}
        sources["runtime"] = (f"{args.eager_step_seconds * 1e3:.3f} ms a step kernel by kernel "
                              f"(MT_CUDA_GRAPHS=off) against {device * 1e3:.3f} ms of device "
                              f"time in {launches} launches: the gap g for which each launch "
                              f"takes max(its kernel, g) (an upper bound on the wait mtc "
                              f"estimate's launch queue finds, which needs the kernels' "
                              f"order); " + args.source)
    with open(args.output, "w") as f:
        json.dump(system, f, indent=2)
        f.write("\n")
    print(f"families.py: {len(kernels)} families calibrated -> {args.output}")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare")
    c.add_argument("profile")
    c.add_argument("estimate")
    c.add_argument("--runs-must-match", action="store_true")
    c.add_argument("--within", type=float)
    c.add_argument("--min-ms", type=float, default=0.005)
    c.add_argument("--device-within", type=float)
    d = sub.add_parser("diff")
    d.add_argument("before")
    d.add_argument("after")
    k = sub.add_parser("calibrate")
    k.add_argument("pairs", nargs="+", metavar="PROFILE ESTIMATE")
    k.add_argument("--system", required=True)
    k.add_argument("--source", required=True)
    k.add_argument("--min-ms", type=float, default=0.005)
    k.add_argument("--eager-step-seconds", type=float)
    k.add_argument("-o", dest="output", required=True)
    args = parser.parse_args()
    {"compare": compare, "diff": diff, "calibrate": calibrate}[args.command](args)


if __name__ == "__main__":
    main()
