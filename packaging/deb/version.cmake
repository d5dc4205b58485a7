# Package version from the project version and git, evaluated when packages are made (cpack), so
# it follows the commit being packaged without a re-configure.
#
# fw_deb_version(SOURCE_DIR PROJECT_VERSION) sets, in the caller's scope:
#   FW_DEB_VERSION  0.1.0+git20261203.142501.1a2b3c4 (commit time in UTC, then the short hash), so
#                   later commits sort later under dpkg --compare-versions; plain 0.1.0 without git.
#   FW_DEB_DATE     the commit time in RFC 2822 form, for the changelog (reproducible).
#   FW_GIT_COMMIT   the full hash, or "unknown".
# FW_DEB_VERSION in the environment overrides the computed version (e.g. for a release build).
# Works in shallow clones and without tags: it reads only HEAD.
# The first call in a process stores its result in the environment and later calls return it, so
# the package version and the changelog written during one cpack run agree even if a commit lands
# in between.
function(fw_deb_version source_dir project_version)
  if(DEFINED ENV{FW_DEB_RESOLVED_VERSION})
    set(FW_DEB_VERSION "$ENV{FW_DEB_RESOLVED_VERSION}" PARENT_SCOPE)
    set(FW_DEB_DATE "$ENV{FW_DEB_RESOLVED_DATE}" PARENT_SCOPE)
    set(FW_GIT_COMMIT "$ENV{FW_DEB_RESOLVED_COMMIT}" PARENT_SCOPE)
    return()
  endif()
  set(version ${project_version})
  set(date "")
  set(commit unknown)
  find_program(FW_GIT git)
  if(FW_GIT)
    execute_process(
      COMMAND ${CMAKE_COMMAND} -E env TZ=UTC ${FW_GIT} -C ${source_dir} log -1
              --date=format-local:%Y%m%d.%H%M%S "--format=%cd %h %H %cD"
      OUTPUT_VARIABLE out
      RESULT_VARIABLE rc
      ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(rc EQUAL 0 AND out MATCHES "^([0-9.]+) ([0-9a-f]+) ([0-9a-f]+) (.+)$")
      set(version "${project_version}+git${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
      set(commit ${CMAKE_MATCH_3})
      set(date "${CMAKE_MATCH_4}")
    endif()
  endif()
  if(NOT "$ENV{FW_DEB_VERSION}" STREQUAL "")
    set(version "$ENV{FW_DEB_VERSION}")
  endif()
  if(date STREQUAL "")
    # No git: the build's own time (SOURCE_DATE_EPOCH, when set, makes it reproducible).
    string(TIMESTAMP date "%a, %d %b %Y %H:%M:%S +0000" UTC)
  endif()
  set(ENV{FW_DEB_RESOLVED_VERSION} "${version}")
  set(ENV{FW_DEB_RESOLVED_DATE} "${date}")
  set(ENV{FW_DEB_RESOLVED_COMMIT} "${commit}")
  set(FW_DEB_VERSION "${version}" PARENT_SCOPE)
  set(FW_DEB_DATE "${date}" PARENT_SCOPE)
  set(FW_GIT_COMMIT "${commit}" PARENT_SCOPE)
endfunction()
