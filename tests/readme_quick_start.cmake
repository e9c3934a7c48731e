# Fails unless the first ```cpp block under "## Quick start" in README.md is
# exactly the part of examples/quick_start.cpp between its
# "// [README quick start]" and "// [README quick start end]" lines.
#   cmake -DREADME=README.md -DEXAMPLE=examples/quick_start.cpp -P readme_quick_start.cmake
file(READ "${README}" readme)
file(READ "${EXAMPLE}" example)

string(FIND "${readme}" "\n## Quick start\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README}: no \"## Quick start\" section")
endif()
string(SUBSTRING "${readme}" ${at} -1 readme)
string(FIND "${readme}" "\n```cpp\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README}: no ```cpp block under \"## Quick start\"")
endif()
math(EXPR at "${at} + 8")
string(SUBSTRING "${readme}" ${at} -1 readme)
string(FIND "${readme}" "\n```" end)
math(EXPR end "${end} + 1")
string(SUBSTRING "${readme}" 0 ${end} block)

set(open_marker "// [README quick start]\n")
string(FIND "${example}" "${open_marker}" at)
string(FIND "${example}" "// [README quick start end]" end)
if(at EQUAL -1 OR end EQUAL -1)
  message(FATAL_ERROR "${EXAMPLE}: no \"// [README quick start]\" ... \"// [README quick start end]\" region")
endif()
string(LENGTH "${open_marker}" length)
math(EXPR at "${at} + ${length}")
math(EXPR length "${end} - ${at}")
string(SUBSTRING "${example}" ${at} ${length} region)

if(NOT block STREQUAL region)
  message(FATAL_ERROR
    "The README's Quick start differs from ${EXAMPLE}; copy the file's marked region "
    "into the README's ```cpp block.\n--- README ---\n${block}--- ${EXAMPLE} ---\n${region}")
endif()
message(STATUS "README Quick start matches ${EXAMPLE}")
