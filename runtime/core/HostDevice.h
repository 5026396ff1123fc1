// Functions that the CPU and the CUDA backends share, compiled for both.
#ifndef MT_RUNTIME_CORE_HOSTDEVICE_H
#define MT_RUNTIME_CORE_HOSTDEVICE_H

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

#endif
