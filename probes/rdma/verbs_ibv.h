// The real verbs seam over libibverbs. Compiled and linked on every build; where the kernel has
// no RDMA support ListDevices() reports Unavailable (ibv_get_device_list fails with ENOSYS).
#pragma once

#include <memory>
#include <string>

#include "probes/rdma/verbs.h"

namespace fw::rdma {

// `sysfs_root` ("/sys") is where GID types and netdevs are read (gid_attrs/types/<idx>).
std::unique_ptr<Verbs> MakeIbverbs(std::string sysfs_root = "/sys");

}  // namespace fw::rdma
