# Checks the aggregator's stage layering (docs/design.md, Layout): a stage's library sources include
# headers only from the stages below it. Run as the ctest `aggregator_layering`:
#   cmake -DROOT=<source dir>/daemon/aggregator -P layering_check.cmake
# Every stage is also its own library that links only the stages below it, so most violations
# would fail to link too; this names the file and the line, and also catches header-only uses.
# Headers below api/ include nothing of exporter/ (metrics are registered in the .cc files).
# Tests, benchmarks and fuzz targets may include what they need.
cmake_minimum_required(VERSION 3.20)
if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<daemon/aggregator dir> -P layering_check.cmake")
endif()

# stage -> the aggregator stages its sources may include (itself included)
set(allowed_model model)
set(allowed_plan model plan)
set(allowed_ingest model plan ingest)
set(allowed_analysis model plan ingest analysis)
set(allowed_api model plan ingest analysis api)
# qualify/ and collective/ sit above analysis; their own rules are in their READMEs.
set(all_stages model plan ingest analysis api)

set(failures "")
foreach(stage model plan ingest analysis api)
  file(GLOB_RECURSE sources RELATIVE ${ROOT} ${ROOT}/${stage}/*.h ${ROOT}/${stage}/*.cc)
  foreach(src ${sources})
    if(src MATCHES "_(test|bench|fuzz)\\.cc$" OR src MATCHES "/testing/")
      continue()
    endif()
    file(STRINGS ${ROOT}/${src} lines REGEX "^#include \"(daemon/aggregator|exporter|common/http)/")
    foreach(line ${lines})
      if(line MATCHES "^#include \"daemon/aggregator/([a-z_]+)/")
        set(to ${CMAKE_MATCH_1})
        if(to IN_LIST all_stages AND NOT to IN_LIST allowed_${stage})
          string(REPLACE ";" ", " may "${allowed_${stage}}")
          list(APPEND failures "${src}: ${line} (${stage}/ may include only: ${may})")
        endif()
      elseif(line MATCHES "^#include \"daemon/aggregator/[a-z_]+\\.h\"")
        list(APPEND failures "${src}: ${line} (stages do not include the composition)")
      endif()
      # State does not include exposition: below api/, only a .cc may register metrics.
      if(line MATCHES "^#include \"exporter/" AND src MATCHES "\\.h$" AND NOT stage STREQUAL "api")
        list(APPEND failures "${src}: ${line} (${stage}/ headers do not include exporter/)")
      endif()
      # HTTP is the api stage's alone.
      if(line MATCHES "(exporter/http_server|common/http/[a-z_]+)\\.h" AND NOT stage STREQUAL "api")
        list(APPEND failures "${src}: ${line} (only api/ serves HTTP)")
      endif()
    endforeach()
  endforeach()
endforeach()

if(failures)
  list(JOIN failures "\n  " text)
  message(FATAL_ERROR "aggregator layering violated:\n  ${text}")
endif()
message(STATUS "aggregator layering: ok")
