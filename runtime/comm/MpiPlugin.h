// The entry points of the MPI communicator plugin (libmtc_mpi.so, comm/MpiComm.cpp).
// mtrun loads it with dlopen only under a launcher, so a one-process run never needs
// an MPI library. Plugin and runtime are built together, by the same compiler: the C
// names only avoid C++ name mangling in dlsym.
#ifndef MT_RUNTIME_COMM_MPIPLUGIN_H
#define MT_RUNTIME_COMM_MPIPLUGIN_H

#include "comm/Comm.h"

#include <memory>

#define MT_PLUGIN_EXPORT __attribute__((visibility("default")))

extern "C" {
/// MPI_COMM_WORLD split into the plan's grid; `*status` fails if the world does not
/// match.
using MtMpiMakeComm = void (*)(const mt::GridShape *shape, std::unique_ptr<mt::Comm> *out,
                               mt::Status *status);
/// MPI_Abort of the whole job, once MPI is initialised.
using MtMpiAbort = void (*)();
/// This process's rank in MPI_COMM_WORLD (0 before MPI is initialised).
using MtMpiWorldRank = int (*)();
}

/// The plugin's file name; mtrun looks beside its own executable, then in ../lib.
inline constexpr const char *kMpiPluginName = "libmtc_mpi.so";

#endif
