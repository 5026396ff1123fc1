#include "comm/Comm.h"
#include "comm/MpiPlugin.h"
#include "core/DType.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace mt {
namespace {

class LocalComm final : public Comm {
public:
  Status allReduceSum(Group, const TensorView &in, const TensorView &out) override {
    if (in.data != out.data)
      std::memcpy(out.data, in.data, in.bytes());
    return Status::success();
  }
  Status allGather(Group, const TensorView &in, const TensorView &out, int) override {
    if (in.data != out.data)
      std::memmove(out.data, in.data, in.bytes());
    return Status::success();
  }
  Status reduceScatter(Group g, const TensorView &in, const TensorView &out, int) override {
    return allReduceSum(g, in, out);
  }
  Status allReduceSum(Group, double &) override { return Status::success(); }
  Status allReduceSumAmong(Group, const std::vector<int> &, const TensorView &) override {
    return Status::success();
  }
  Status send(Group, int, const void *, size_t, int) override {
    return Status::failure("one process has no peers to send to");
  }
  Status recv(Group, int, void *, size_t, int) override {
    return Status::failure("one process has no peers to receive from");
  }
  Status waitSends() override { return Status::success(); }
  Status allToAll(Group, const void *send, const std::vector<size_t> &sendBytes, void *recv,
                  const std::vector<size_t> &) override {
    std::memmove(recv, send, sendBytes[0]);
    return Status::success();
  }
};

/// The MPI plugin, once loaded: its entry points.
struct MpiPlugin {
  MtMpiMakeComm makeComm = nullptr;
  MtMpiAbort abort = nullptr;
  MtMpiWorldRank worldRank = nullptr;
};
MpiPlugin plugin;

/// The directory of this executable.
std::string executableDir() {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return ".";
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

/// Loads libmtc_mpi.so from MTC_MPI_PLUGIN, beside the executable, or from ../lib.
/// RTLD_GLOBAL: Open MPI's own components resolve libmpi's symbols globally.
Status loadMpiPlugin() {
  if (plugin.makeComm)
    return Status::success();
  std::vector<std::string> candidates;
  if (const char *path = std::getenv("MTC_MPI_PLUGIN"))
    candidates.push_back(path);
  const std::string dir = executableDir();
  candidates.push_back(dir + "/" + kMpiPluginName);
  candidates.push_back(dir + "/../lib/" + kMpiPluginName);
  std::string errors;
  for (const std::string &path : candidates) {
    if (access(path.c_str(), F_OK) != 0) {
      if (path == candidates.front() && std::getenv("MTC_MPI_PLUGIN"))
        errors += cat("\n  MTC_MPI_PLUGIN=", path, ": no such file");
      continue;
    }
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
      errors += cat("\n  ", dlerror());
      continue;
    }
    plugin.makeComm = reinterpret_cast<MtMpiMakeComm>(dlsym(handle, "mtMpiMakeGridComm"));
    plugin.abort = reinterpret_cast<MtMpiAbort>(dlsym(handle, "mtMpiAbort"));
    plugin.worldRank = reinterpret_cast<MtMpiWorldRank>(dlsym(handle, "mtMpiWorldRank"));
    if (plugin.makeComm && plugin.abort && plugin.worldRank)
      return Status::success();
    plugin = {};
    errors += cat("\n  ", path, ": not the MPI communicator plugin");
  }
  if (errors.empty())
    errors = cat("\n  no ", kMpiPluginName, " beside ", dir, " or in ", dir, "/../lib");
  return Status::failure(cat("this process was started by an MPI launcher, but the MPI "
                             "communicator cannot be loaded (an MPI library must be installed "
                             "where several ranks run):",
                             errors));
}

} // namespace

std::unique_ptr<Comm> makeLocalComm() { return std::make_unique<LocalComm>(); }

bool launchedByMpi() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name))
      return true;
  return false;
}

Status makeMpiComm(const GridShape &shape, std::unique_ptr<Comm> &out) {
  if (Status s = loadMpiPlugin(); !s.ok())
    return s;
  Status status = Status::success();
  plugin.makeComm(&shape, &out, &status);
  return status;
}

void abortAll(const std::string &message) {
  const int rank = plugin.worldRank ? plugin.worldRank() : 0;
  std::fprintf(stderr, "mtrun: rank %d: %s\n", rank, message.c_str());
  std::fflush(stderr);
  if (plugin.abort)
    plugin.abort();
  std::exit(1);
}

} // namespace mt
