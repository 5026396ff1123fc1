"""Reads back mtrun's TensorBoard event files with a reader of its own (TFRecord framing
with its CRC-32C checks, then tensorflow.Event's protocol-buffer fields), and compares
each step's scalars (and each evaluation's loss and perplexity) with the --metrics file of
the same run. The files are read in the order they were written, and a session log
starting the run again at a step drops what the files before held at or past it, as
TensorBoard's reader does; a step shown twice for a tag is a failure. Where the
`tensorboard` package is installed, its own reader must see the same scalars.

Prints what it read; exits 1 where anything disagrees.

read_events.py DIR METRICS [LOSS_SCALE] [--peak-tflops X]   (X: mtrun's, whose mfu is then
the throughput over X at every step)"""
import glob
import math
import struct
import sys
import time


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# CRC-32C's published check value, so that the checks below are the format's.
assert crc32c(b"123456789") == 0xE3069283


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        (length_crc,) = struct.unpack_from("<I", data, at + 8)
        assert length_crc == masked(crc32c(data[at:at + 8])), "length checksum"
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack_from("<I", data, at + 12 + length)
        assert body_crc == masked(crc32c(body)), "record checksum"
        yield body
        at += 16 + length


def varint(data, at):
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


# tensorflow.Event's fields and their wire types: wall_time (double), step (varint),
# file_version (bytes), summary (bytes), session_log (bytes); Summary.value (bytes);
# Value's tag (bytes) and simple_value (float); SessionLog.status (varint, START 1).
EVENT_WIRES = {1: 1, 2: 0, 3: 2, 5: 2, 7: 2}
VALUE_WIRES = {1: 2, 2: 5}
SESSION_LOG_WIRES = {1: 0}
START = 1


def fields(data, wires=None):
    """(field number, value) of a message: ints, bytes, or raw 4/8-byte little-endian;
    each field's wire type as `wires` has it, where given."""
    at = 0
    while at < len(data):
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        assert wires is None or wires.get(number) == wire, f"field {number}: wire type {wire}"
        if wire == 0:
            value, at = varint(data, at)
        elif wire == 1:
            value, at = data[at:at + 8], at + 8
        elif wire == 2:
            n, at = varint(data, at)
            value, at = data[at:at + n], at + n
        elif wire == 5:
            value, at = data[at:at + 4], at + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, value


def same(a, b):
    """Equal to float32's rounding (a relative 2^-24), a NaN (a skipped step's gradient
    norm) to a NaN."""
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=2 ** -23)


def main():
    args = sys.argv[1:]
    peak = None
    if "--peak-tflops" in args:
        at = args.index("--peak-tflops")
        peak = float(args[at + 1])
        del args[at:at + 2]
    directory, metrics = args[0], args[1]
    loss_scale = float(args[2]) if len(args) > 2 else None
    # In the order they were written: by their first event's time.
    files = sorted(glob.glob(f"{directory}/events.out.tfevents.*"),
                   key=lambda path: struct.unpack("<d", dict(fields(
                       next(records(path)), EVENT_WIRES))[1])[0])
    version, shown, restarts = None, [], []  # shown: (step, tag, value) in order
    for path in files:
        times = []
        for i, body in enumerate(records(path)):
            event = dict(fields(body, EVENT_WIRES))
            times.append(struct.unpack("<d", event[1])[0])
            if i == 0:  # the file's first event names the format, and only that
                version = event[3].decode() if 3 in event and 5 not in event else None
            if 7 in event:
                status = dict(fields(event[7], SESSION_LOG_WIRES)).get(1)
                assert status == START and i == 1, \
                    "a restart is a file's first event after the version"
                restarts.append(event.get(2, 0))
                shown = [s for s in shown if s[0] < event.get(2, 0)]
            if 5 in event:
                for number, value in fields(event[5], {1: 2}):
                    v = dict(fields(value, VALUE_WIRES))
                    shown.append((event.get(2, 0), v[1].decode(),
                                  struct.unpack("<f", v[2])[0]))
        # Seconds since the epoch, in order, within the last hour.
        assert times == sorted(times) and all(0 < time.time() - t < 3600 for t in times), \
            f"{path}: the events' times"
    steps = {}
    for step, tag, value in shown:
        assert tag not in steps.get(step, {}), f"step {step} of {tag} shown twice"
        steps.setdefault(step, {})[tag] = value
    expected = {}
    for line in open(metrics):
        words = line.split()
        if words[0] == "step":
            expected.setdefault(int(words[1]), {}).update({
                "lm loss": float(words[3]), "learning-rate": float(words[5]),
                "grad-norm": float(words[7])})
        else:  # "validation step N loss X", or test's; perplexity as Megatron's, clamped
            tag = f"lm loss {words[0]}"
            loss = float(words[4])
            expected.setdefault(int(words[2]), {}).update(
                {tag: loss, f"{tag} ppl": math.exp(min(loss, 20))})
    equal = sorted(steps) == sorted(expected) and all(
        tag in steps[s] and same(steps[s][tag], value)
        for s, want in expected.items() for tag, value in want.items())
    equal &= all(s["tokens-per-second"] > 0 and s["iteration-time"] > 0 and s["throughput"] > 0
                 for s in steps.values())
    # What the rank holds for the plan: the same at every step, at most its peak.
    equal &= all(0 < s["mem-allocated-bytes"] <= s["mem-max-allocated-bytes"]
                 for s in steps.values())
    equal &= len({s["mem-allocated-bytes"] for s in steps.values()}) == 1
    # Each step's tokens (tokens/s times seconds) and model FLOPs per token (TFLOP/s over
    # tokens/s) are the plan's: the same for every step, to float's precision.
    for figure in (lambda s: s["tokens-per-second"] * s["iteration-time"],
                   lambda s: s["throughput"] / s["tokens-per-second"]):
        values = [figure(s) for s in steps.values()]
        equal &= max(values) - min(values) <= 1e-5 * max(values)
    if loss_scale is not None:
        equal &= steps[1]["loss-scale"] == loss_scale
    if peak is not None:
        equal &= all(same(s["mfu"], s["throughput"] / peak) for s in steps.values())
    tags = sorted({tag for scalars in steps.values() for tag in scalars})
    again = "".join(f", restarted at step {step}" for step in restarts)
    print(f"events: {len(files)} file{'s' if len(files) > 1 else ''}{again}, version "
          f"{version}, {len(steps)} steps, tags {', '.join(tags)}; equal to the metrics: "
          f"{equal}")
    if not equal:
        sys.exit(1)
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        print("tensorboard's reader: not installed")
        return
    accumulator = event_accumulator.EventAccumulator(directory)
    accumulator.Reload()
    theirs = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in tags}
    agree = all(
        [step for step, _ in theirs[tag]] == sorted(s for s in steps if tag in steps[s]) and
        all(same(value, steps[step][tag]) for step, value in theirs[tag])
        for tag in tags)
    print(f"tensorboard's reader: tags {', '.join(sorted(accumulator.Tags()['scalars']))}; "
          f"the same scalars: {agree}")
    if not agree:
        sys.exit(1)


if __name__ == "__main__":
    main()
