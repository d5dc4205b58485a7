// The exported entry point of libfabricwatch-gloo.so (gloo_module.h). Everything else in the
// module is hidden, so its copies of fw_collective and fw_common never interpose on the agent's.
#include "probes/collective/gloo_module.h"

extern "C" __attribute__((visibility("default"))) const fw::collective::GlooModuleV1*
fw_gloo_module_v1() {
  static const fw::collective::GlooModuleV1 module{fw::collective::kGlooModuleAbi,
                                                   fw::collective::GlooModuleLayout(),
                                                   &fw::collective::ConnectGloo};
  return &module;
}
