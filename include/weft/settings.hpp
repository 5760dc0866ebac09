// Reading a WEFT_* setting from outside the library: the Python module's own settings (WEFT_ENABLE_X64) go
// through the one table and parser of every WEFT_* variable (src/core/settings.hpp, docs/settings.md), so that a
// value the setting does not know is refused with the same words everywhere.
#pragma once
#include <string>
#include <string_view>

namespace weft {

// The value of the WEFT_* `variable`, one of a closed list of values, as that list spells it; "" when the
// variable is absent or empty (unset). A value outside the list is an InvalidArgument naming the variable, the
// value and every accepted value; a variable weft does not read, or one that takes no closed list, too.
std::string setting_choice(std::string_view variable);

}  // namespace weft
