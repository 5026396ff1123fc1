"""Whether losses of --metrics files are equal (to 1e-12, relative: fp64 plans whose
sums run in another order).

compare_losses.py [--mean] FILE LABEL... [FILE LABEL...]...

Each LABEL picks the loss of the line that starts with it ('step 1', 'validation step
2'); with --mean, the first file's labels give one loss, their mean. Prints
"equal: N losses" and exits 0 when all N agree; otherwise prints them and exits 1."""
import os
import sys


def main():
    args = sys.argv[1:]
    mean = args[:1] == ["--mean"]
    args = args[1:] if mean else args
    groups = []
    for arg in args:
        if os.path.isfile(arg):
            groups.append((arg, []))
        else:
            groups[-1][1].append(arg)
    losses = []
    for i, (path, labels) in enumerate(groups):
        lines = open(path).read().splitlines()
        found = []
        for label in labels:
            matches = [line for line in lines if line.startswith(label + " loss ")]
            if len(matches) != 1:
                sys.exit(f"{path}: {len(matches)} lines start with '{label} loss'")
            found.append(float(matches[0].split()[len(label.split()) + 1]))
        losses += [sum(found) / len(found)] if mean and i == 0 else found
    first = losses[0]
    if all(abs(loss - first) <= 1e-12 * abs(first) for loss in losses):
        print(f"equal: {len(losses)} losses")
        return
    print("not equal:", " ".join(repr(loss) for loss in losses))
    sys.exit(1)


if __name__ == "__main__":
    main()
