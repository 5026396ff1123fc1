import os
import sys
import lit.formats

config.name = "mtc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mtc_obj_root, "test", "lit")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in", "Inputs", "fails-within.sh"]

tools = os.path.join(config.mtc_obj_root, "tools")
config.environment["PATH"] = os.pathsep.join(
    [tools, config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
# Tests run side by side on few cores: OpenMP's waiting threads sleep rather than spin
# (two processes' spinning threads on 2 cores made a gradient check 4x slower).
config.environment["OMP_WAIT_POLICY"] = "passive"
config.substitutions.append(("%models", os.path.join(config.mtc_src_root, "models")))
config.substitutions.append(("%bench", os.path.join(config.mtc_src_root, "bench")))
# A captured FileCheck variable never leaks across CHECK-LABELs.
config.substitutions.append(("FileCheck", "FileCheck --enable-var-scope"))
config.substitutions.append(("%python", sys.executable))
# The suite runs the CPU backend on purpose, so it means the same on a machine with a
# GPU; the CUDA backend has its own tests (cuda_backend_test, the bundle's test-gpu.sh).
config.substitutions.append(("%mtrun", "mtrun --backend cpu"))
# Comm::watch's probe, under mpirun (test/unit/WatchProbe.cpp).
config.substitutions.append(
    ("%watch-probe", "mpirun --allow-run-as-root --oversubscribe -n 2 -x MTC_MPI_PLUGIN=%s %s" %
     (os.path.join(tools, "libmtc_mpi.so"),
      os.path.join(config.mtc_obj_root, "runtime", "watch_probe"))))
# A command that must fail, promptly: a hang past the limit fails the test.
config.substitutions.append(
    ("%fails-within", "sh " + os.path.join(config.mtc_src_root, "test", "lit", "fails-within.sh")))
