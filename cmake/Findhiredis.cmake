# Findhiredis.cmake: finds hiredis and always ends with the imported target
# hiredis::hiredis, whichever way hiredis was installed.
#
#   hiredis >= 1.0      ships hiredis-config.cmake with hiredis::hiredis: used as is.
#   Debian's 0.14.1     ships a HiredisConfig.cmake that only sets variables and
#                       a hiredis.pc whose include dir is .../include/hiredis;
#                       we take the pkg-config hints and find the files ourselves.
#   anything else       plain find_path/find_library.
#
# The target is GLOBAL so that a project using distlock by add_subdirectory
# sees it from its own directory too.
#
# Sets hiredis_FOUND, hiredis_VERSION, hiredis_INCLUDE_DIR, hiredis_LIBRARY.

if(TARGET hiredis::hiredis)
  set(hiredis_FOUND TRUE)
  return()
endif()

find_package(hiredis CONFIG QUIET)
if(TARGET hiredis::hiredis)
  get_target_property(hiredis_imported hiredis::hiredis IMPORTED)
  get_target_property(hiredis_global hiredis::hiredis IMPORTED_GLOBAL)
  if(hiredis_imported AND NOT hiredis_global)
    set_target_properties(hiredis::hiredis PROPERTIES IMPORTED_GLOBAL TRUE)
  endif()
  set(hiredis_FOUND TRUE)
  return()
endif()

find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_HIREDIS QUIET hiredis)
endif()

# We include <hiredis/hiredis.h>, so we want the directory above hiredis/.
find_path(hiredis_INCLUDE_DIR hiredis/hiredis.h
  HINTS "${PC_HIREDIS_INCLUDEDIR}/.." ${PC_HIREDIS_INCLUDE_DIRS})
find_library(hiredis_LIBRARY NAMES hiredis
  HINTS ${PC_HIREDIS_LIBDIR} ${PC_HIREDIS_LIBRARY_DIRS})

if(hiredis_INCLUDE_DIR AND EXISTS "${hiredis_INCLUDE_DIR}/hiredis/hiredis.h")
  file(STRINGS "${hiredis_INCLUDE_DIR}/hiredis/hiredis.h" hiredis_version_lines
       REGEX "^#define HIREDIS_(MAJOR|MINOR|PATCH) [0-9]+")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*HIREDIS_${part} ([0-9]+).*" "\\1" hiredis_version_${part}
                         "${hiredis_version_lines}")
  endforeach()
  set(hiredis_VERSION "${hiredis_version_MAJOR}.${hiredis_version_MINOR}.${hiredis_version_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(hiredis
  REQUIRED_VARS hiredis_LIBRARY hiredis_INCLUDE_DIR
  VERSION_VAR hiredis_VERSION)
mark_as_advanced(hiredis_INCLUDE_DIR hiredis_LIBRARY)

if(hiredis_FOUND AND NOT TARGET hiredis::hiredis)
  add_library(hiredis::hiredis UNKNOWN IMPORTED GLOBAL)
  set_target_properties(hiredis::hiredis PROPERTIES
    IMPORTED_LOCATION "${hiredis_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${hiredis_INCLUDE_DIR}")
endif()
