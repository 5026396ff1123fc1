"""compare_losses.py A B TOLERANCE: the per-step losses of two --metrics files agree
within TOLERANCE relative; prints the largest difference."""
import sys


def losses(path):
    with open(path) as f:
        return [float(line.split()[3]) for line in f]


a, b, tolerance = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
if len(a) != len(b) or not a:
    sys.exit(f"{len(a)} steps against {len(b)}")
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"losses agree: {len(a)} steps, largest relative difference below {tolerance:g}"
      if worst <= tolerance else f"losses differ: {worst:.3e} > {tolerance:g}")
sys.exit(0 if worst <= tolerance else 1)
