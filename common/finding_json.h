// JSON form of a Finding (the DESIGN.md schema), kept apart so finding.h needs no JSON library.
#pragma once

#include <nlohmann/json.hpp>

#include "common/finding.h"

namespace fw {

// {kind, severity, location{type,id,node,device,port}, summary, evidence{}, confidence}.
nlohmann::json FindingToJson(const Finding& finding);

}  // namespace fw
