# ctest's static_checks.WrongArgumentsNameTheArgument: builds the target
# softwave_wrong_arguments (wrong_arguments.cpp, excluded from the normal
# build), which must fail, and finds in the compiler's output every message
# that the source lists after "// expect: ".
#   cmake -DBUILD_DIR=<build> -DCONFIG=<config> -DSOURCE=<wrong_arguments.cpp>
#         -P check.cmake
execute_process(
  COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --config ${CONFIG}
          --target softwave_wrong_arguments
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(result EQUAL 0)
  message(FATAL_ERROR "wrong_arguments.cpp compiled: the entry points accept "
                      "arguments they should refuse at compile time")
endif()
file(STRINGS ${SOURCE} expected REGEX "^ *// expect: ")
set(missing "")
foreach(line IN LISTS expected)
  string(REGEX REPLACE "^ *// expect: " "" message "${line}")
  string(FIND "${output}" "${message}" at)
  if(at EQUAL -1)
    string(APPEND missing "\n  ${message}")
  endif()
endforeach()
list(LENGTH expected count)
if(count EQUAL 0 OR missing)
  message(FATAL_ERROR "the compiler did not report (of ${count}):${missing}\n"
                      "--- compiler output ---\n${output}")
endif()
message(STATUS "all ${count} wrong calls refused, naming the argument")
