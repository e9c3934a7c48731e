# Fails unless the first ```cpp block under "## ${SECTION}" in README.md is
# exactly the part of EXAMPLE between its "// [${MARKER}]" and
# "// [${MARKER} end]" lines.
#   cmake -DREADME=README.md -DEXAMPLE=examples/cluster.cpp -DSECTION="Redis Cluster"
#         -DMARKER="README cluster" -P readme_example.cmake
file(READ "${README}" readme)
file(READ "${EXAMPLE}" example)

string(FIND "${readme}" "\n## ${SECTION}\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README}: no \"## ${SECTION}\" section")
endif()
string(SUBSTRING "${readme}" ${at} -1 readme)
string(FIND "${readme}" "\n```cpp\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README}: no ```cpp block under \"## ${SECTION}\"")
endif()
math(EXPR at "${at} + 8")
string(SUBSTRING "${readme}" ${at} -1 readme)
string(FIND "${readme}" "\n```" end)
math(EXPR end "${end} + 1")
string(SUBSTRING "${readme}" 0 ${end} block)

set(open_marker "// [${MARKER}]\n")
string(FIND "${example}" "${open_marker}" at)
string(FIND "${example}" "// [${MARKER} end]" end)
if(at EQUAL -1 OR end EQUAL -1)
  message(FATAL_ERROR "${EXAMPLE}: no \"// [${MARKER}]\" ... \"// [${MARKER} end]\" region")
endif()
string(LENGTH "${open_marker}" length)
math(EXPR at "${at} + ${length}")
math(EXPR length "${end} - ${at}")
string(SUBSTRING "${example}" ${at} ${length} region)

if(NOT block STREQUAL region)
  message(FATAL_ERROR
    "The README's \"${SECTION}\" block differs from ${EXAMPLE}; copy the file's marked region "
    "into the README's ```cpp block.\n--- README ---\n${block}--- ${EXAMPLE} ---\n${region}")
endif()
message(STATUS "README \"${SECTION}\" matches ${EXAMPLE}")
