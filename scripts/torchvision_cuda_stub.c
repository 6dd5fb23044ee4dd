/* Built by scripts/torchvision_cpu.py, only where torch is a CPU-only build (this project's setup pins
 * torch==2.13.0 from a local CPU wheel) and torchvision is the package index's CUDA build.
 * Stands in for libc10_cuda.so / libtorch_cuda.so so that torchvision 0.28.0's CUDA-built _C.so
 * loads beside torch 2.13.0+cpu. These are the 16 symbols _C.so needs from those two libraries
 * (nm -D --undefined-only _C.so minus what libc10/libtorch/libtorch_cpu/libtorch_python define;
 * the libcudart.so.13 symbols come from the real libcudart that the wheel bundles),
 * plus c10::cuda::current_device() that image.so also needs. Only reached from CUDA kernels. */
#include <stdio.h>
#include <stdlib.h>
static void no_cuda(const char *f) {
  fprintf(stderr, "torchvision: CUDA path called with a CPU-only torch (%s)\n", f);
  abort();
}
#define STUB(sym) void sym(void) { no_cuda(#sym); }
STUB(_ZN2at4cuda26getCurrentDevicePropertiesEv)            /* at::cuda::getCurrentDeviceProperties() */
STUB(_ZN3c104cuda14ExchangeDeviceEa)                        /* c10::cuda::ExchangeDevice(signed char) */
STUB(_ZN3c104cuda14MaybeSetDeviceEa)
STUB(_ZN3c104cuda17getStreamFromPoolEba)
STUB(_ZN3c104cuda17getStreamFromPoolEia)
STUB(_ZN3c104cuda20getCurrentCUDAStreamEa)
STUB(_ZN3c104cuda20getDefaultCUDAStreamEa)
STUB(_ZN3c104cuda20setCurrentCUDAStreamENS0_10CUDAStreamE)
STUB(_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb)
STUB(_ZN3c104cuda9GetDeviceEPa)
STUB(_ZN3c104cuda9SetDeviceEab)
STUB(_ZNK3c104cuda10CUDAStream11synchronizeEv)
STUB(_ZNK3c104cuda10CUDAStream5queryEv)
STUB(_ZNK3c104cuda10CUDAStream6streamEv)
signed char _ZN3c104cuda12device_countEv(void) { return 0; }    /* c10::cuda::device_count() */
signed char _ZN3c104cuda14current_deviceEv(void) { return -1; } /* c10::cuda::current_device() (image.so) */
void *_ZN3c104cuda20CUDACachingAllocator9allocatorE = 0;         /* std::atomic<CUDAAllocator*> */
