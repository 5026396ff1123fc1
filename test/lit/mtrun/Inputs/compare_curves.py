"""compare_curves.py A B LOSS_TOLERANCE NORM_TOLERANCE: the per-step losses and gradient
norms of two --metrics files agree within the tolerances (relative, worst step), with
as many steps in each. The norm sees what the loss does not at first: a gradient scaled
or counted twice (Adam is blind to the scale), or another learning rate. Prints the
largest differences, so tolerances can stay near what the runs reach."""
import math
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "e2e"))
from equivalence import grad_norms, losses  # noqa: E402


def worst(a, b):
    """The largest relative difference; infinite where a value is not finite or the
    reference is zero."""
    return max(abs(x - y) / abs(y) if math.isfinite(x) and math.isfinite(y) and y else math.inf
               for x, y in zip(a, b))


a, b = sys.argv[1], sys.argv[2]
loss_tolerance, norm_tolerance = float(sys.argv[3]), float(sys.argv[4])
loss_a, loss_b, norm_a, norm_b = losses(a), losses(b), grad_norms(a), grad_norms(b)
if len(loss_a) != len(loss_b) or len(norm_a) != len(norm_b) or not loss_a:
    sys.exit(f"{len(loss_a)} steps against {len(loss_b)}")
loss_error, norm_error = worst(loss_a, loss_b), worst(norm_a, norm_b)
ok = loss_error <= loss_tolerance and norm_error <= norm_tolerance
print(f"{len(loss_a)} steps: losses {loss_error:.2e} (<= {loss_tolerance:g}), gradient norms "
      f"{norm_error:.2e} (<= {norm_tolerance:g}): {'agree' if ok else 'DIFFER'}")
sys.exit(0 if ok else 1)
