# read_lines(path out): the lines of `path`, every one, as a list whose
# elements hold no list syntax: ";" "[" and "]" stand as <semicolon>,
# <open> and <close> (an unbalanced bracket would join lines into one
# element). restore_line(var) turns a line back as it was.
function(read_lines path out)
  file(READ "${path}" text)
  string(REPLACE ";" "<semicolon>" text "${text}")
  string(REPLACE "[" "<open>" text "${text}")
  string(REPLACE "]" "<close>" text "${text}")
  string(REPLACE "\n" ";" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

macro(restore_line var)
  string(REPLACE "<semicolon>" ";" ${var} "${${var}}")
  string(REPLACE "<open>" "[" ${var} "${${var}}")
  string(REPLACE "<close>" "]" ${var} "${${var}}")
endmacro()

# read_prose_lines(path out): as read_lines, with every line of a fenced
# code block (its fences too) left empty: the text a reader reads as prose,
# at its own line numbers.
function(read_prose_lines path out)
  read_lines("${path}" lines)
  set(in_code FALSE)
  set(result "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^```")
      if(in_code)
        set(in_code FALSE)
      else()
        set(in_code TRUE)
      endif()
      set(line "")
    elseif(in_code)
      set(line "")
    endif()
    list(APPEND result "${line}")
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()
