"""estimate-holds.test's check: each pair of system files (made, committed) has the same
kernel families, each field equal to 1e-4 (the fit's last digit may differ between
machines)."""
import json
import sys


def kernels(path):
    return json.load(open(path))["kernels"]


for made, committed in zip(sys.argv[1::2], sys.argv[2::2]):
    a, b = kernels(made), kernels(committed)
    assert a.keys() == b.keys(), (made, sorted(a.keys() ^ b.keys()))
    for family in a:
        assert a[family].keys() == b[family].keys(), (family, a[family], b[family])
        for field, value in a[family].items():
            assert abs(value - b[family][field]) <= 1e-4 * abs(b[family][field]), \
                (made, family, field, value, b[family][field])
