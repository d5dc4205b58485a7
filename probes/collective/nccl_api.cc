// dlopen and dlsym of libnccl.so.2 and the CUDA runtime, each symbol checked.
#include "probes/collective/nccl_api.h"

#include <dlfcn.h>
#include <link.h>
#include <spdlog/spdlog.h>

#include <sstream>

namespace fw::collective {
namespace {

// Opens the first of the comma-separated names that loads; `tried` collects each dlerror().
void* OpenFirst(const std::string& names, std::string& opened, std::string& tried) {
  std::stringstream ss(names);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name.empty()) continue;
    dlerror();
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      opened = name;
      if (link_map* map = nullptr; dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name) {
        opened = map->l_name;
      }
      return h;
    }
    const char* err = dlerror();
    if (!tried.empty()) tried += "; ";
    tried += err ? err : name + ": dlopen failed";
  }
  return nullptr;
}

template <typename Fn>
Status Bind(void* handle, const char* symbol, const std::string& library, Fn& out) {
  dlerror();
  void* p = dlsym(handle, symbol);
  if (p == nullptr) {
    const char* err = dlerror();
    return Status::FailedPrecondition(library + " lacks " + symbol +
                                      (err ? std::string(": ") + err : ""));
  }
  out = reinterpret_cast<Fn>(p);
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<NcclLibrary>> NcclLibrary::Load(const NcclLibraryOptions& options) {
  auto lib = std::make_unique<NcclLibrary>();
  std::string tried;
  void* nccl = OpenFirst(options.nccl_library, lib->nccl_path_, tried);
  if (nccl == nullptr) {
    SPDLOG_INFO("component=collective backend=nccl msg=\"library absent\" error=\"{}\"", tried);
    return Status::NotFound("nccl library not found: " + tried);
  }
  tried.clear();
  void* cudart = OpenFirst(options.cudart_libraries, lib->cudart_path_, tried);
  if (cudart == nullptr) {
    SPDLOG_INFO("component=collective backend=nccl msg=\"CUDA runtime absent\" error=\"{}\"",
                tried);
    return Status::NotFound("CUDA runtime not found: " + tried);
  }
  NcclApi& a = lib->api_;
  const std::string& n = lib->nccl_path_;
  const std::string& c = lib->cudart_path_;
  for (Status s :
       {Bind(nccl, "ncclGetVersion", n, a.GetVersion),
        Bind(nccl, "ncclGetUniqueId", n, a.GetUniqueId),
        Bind(nccl, "ncclCommInitRankConfig", n, a.CommInitRankConfig),
        Bind(nccl, "ncclCommGetAsyncError", n, a.CommGetAsyncError),
        Bind(nccl, "ncclCommFinalize", n, a.CommFinalize),
        Bind(nccl, "ncclCommDestroy", n, a.CommDestroy),
        Bind(nccl, "ncclCommAbort", n, a.CommAbort),
        Bind(nccl, "ncclGroupStart", n, a.GroupStart),
        Bind(nccl, "ncclGroupEnd", n, a.GroupEnd),
        Bind(nccl, "ncclAllReduce", n, a.AllReduce),
        Bind(nccl, "ncclAllGather", n, a.AllGather),
        Bind(nccl, "ncclGetErrorString", n, a.GetErrorString),
        Bind(cudart, "cudaGetDeviceCount", c, a.GetDeviceCount),
        Bind(cudart, "cudaSetDevice", c, a.SetDevice),
        Bind(cudart, "cudaDeviceGetStreamPriorityRange", c, a.DeviceGetStreamPriorityRange),
        Bind(cudart, "cudaStreamCreateWithPriority", c, a.StreamCreateWithPriority),
        Bind(cudart, "cudaStreamDestroy", c, a.StreamDestroy),
        Bind(cudart, "cudaMalloc", c, a.Malloc),
        Bind(cudart, "cudaFree", c, a.Free),
        Bind(cudart, "cudaMemset", c, a.Memset),
        Bind(cudart, "cudaMemcpy", c, a.Memcpy),
        Bind(cudart, "cudaEventCreate", c, a.EventCreate),
        Bind(cudart, "cudaEventRecord", c, a.EventRecord),
        Bind(cudart, "cudaEventQuery", c, a.EventQuery),
        Bind(cudart, "cudaEventElapsedTime", c, a.EventElapsedTime),
        Bind(cudart, "cudaEventDestroy", c, a.EventDestroy),
        Bind(cudart, "cudaGetErrorString", c, a.CudaGetErrorString)}) {
    if (!s.ok()) {
      SPDLOG_WARN("component=collective backend=nccl msg=\"missing entry point\" error=\"{}\"",
                  s.message());
      return s;
    }
  }
  SPDLOG_INFO("component=collective backend=nccl msg=\"libraries loaded\" nccl={} cudart={}", n, c);
  return lib;
}

}  // namespace fw::collective
