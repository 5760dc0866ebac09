// The printer: jaxpr's layout, so a JAX user reads a weft program as they read make_jaxpr's output.
#include "printer.hpp"

#include <type_traits>

#include "program_impl.hpp"

namespace weft::program {
namespace {

// JAX's variable names: base-26 letters, 0 -> a, 25 -> z, 26 -> ba.
std::string letter_name(std::size_t n) {
  std::string name;
  do {
    name.insert(name.begin(), static_cast<char>('a' + n % 26));
    n /= 26;
  } while (n > 0);
  return name;
}

template <class T>
std::string tuple_text(const std::vector<T>& items, std::string (*item_text)(const T&)) {
  std::string text = "(";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) text += ", ";
    text += item_text(items[i]);
  }
  return text + (items.size() == 1 ? ",)" : ")");
}

std::string int_text(const std::int64_t& v) { return std::to_string(v); }
std::string index_text(const int& v) { return std::to_string(v); }
std::string name_text(const std::string& v) {
  std::string text = "'";
  text += v;
  text += "'";
  return text;
}
std::string pair_text(const std::pair<int, int>& p) {
  // Appended piece by piece: GCC 12's -Wrestrict misfires on "(" + std::string (GCC bug 105329).
  std::string text = "(";
  text += std::to_string(p.first);
  text += ", ";
  text += std::to_string(p.second);
  text += ")";
  return text;
}
std::string group_text(const std::vector<int>& g) { return tuple_text<int>(g, index_text); }
// A sub-program on lines of its own, indented under its equation (jaxpr prints a cond's branches so).
std::string sub_program_text(const std::shared_ptr<const weft::Program>& sub) {
  if (sub == nullptr) return "<no program>";
  std::string text = "\n      ";
  for (const char c : program_text(sub->impl().program)) {
    text += c;
    if (c == '\n') text += "      ";
  }
  return text + "\n    ";
}

std::string name_of(ValueId id, const std::vector<std::string>& names) {
  return id >= 0 && static_cast<std::size_t>(id) < names.size() ? names[id] : "<value " + std::to_string(id) + ">";
}

std::string typed_name(const Program& program, ValueId id, const std::vector<std::string>& names) {
  const std::string type = id >= 0 && static_cast<std::size_t>(id) < program.types.size()
                               ? type_text(program.types[id]) : "?";
  return name_of(id, names) + ":" + type;
}


}  // namespace

std::vector<std::string> value_names(const Program& program) {
  std::vector<std::string> names(program.types.size());
  std::size_t next = 0;
  auto define = [&](ValueId id) {
    if (id >= 0 && static_cast<std::size_t>(id) < names.size() && names[id].empty()) names[id] = letter_name(next++);
  };
  for (ValueId id : program.constants) define(id);
  for (ValueId id : program.inputs) define(id);
  for (const Equation& eq : program.equations) {
    for (ValueId id : eq.outputs) define(id);
  }
  for (std::size_t id = 0; id < names.size(); ++id) define(static_cast<ValueId>(id));
  return names;
}

std::string param_text(const Param& param) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "True" : "False";
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          return std::to_string(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return "'" + v + "'";
        } else if constexpr (std::is_same_v<T, DType>) {
          return std::string(dtype_name(v));
        } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          return tuple_text<std::int64_t>(v, int_text);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          return tuple_text<std::string>(v, name_text);
        } else if constexpr (std::is_same_v<T, Permutation>) {
          return tuple_text<std::pair<int, int>>(v, pair_text);
        } else if constexpr (std::is_same_v<T, Groups>) {
          return tuple_text<std::vector<int>>(v, group_text);
        } else {
          return tuple_text<std::shared_ptr<const weft::Program>>(v, sub_program_text);
        }
      },
      param);
}

std::string equation_text(const Program& program, std::size_t index, const std::vector<std::string>& names) {
  const Equation& eq = program.equations[index];
  std::string text;
  for (ValueId id : eq.outputs) {
    if (!text.empty()) text += " ";
    text += typed_name(program, id, names);
  }
  if (!text.empty()) text += " = ";
  text += eq.name();
  if (!eq.params.empty()) {
    text += "[";
    bool first = true;
    for (const auto& [name, value] : eq.params) {
      if (!first) text += " ";
      text += name;
      text += "=";
      text += param_text(value);
      first = false;
    }
    text += "]";
  }
  for (ValueId id : eq.inputs) {
    text += " ";
    text += name_of(id, names);
  }
  return text;
}

std::string equation_text(const Program& program, std::size_t index) {
  return equation_text(program, index, value_names(program));
}

std::string program_text(const Program& program) {
  const std::vector<std::string> names = value_names(program);
  std::string text = "{ lambda ";
  for (ValueId id : program.constants) text += typed_name(program, id, names) + " ";
  text += "; ";
  for (ValueId id : program.inputs) text += typed_name(program, id, names) + " ";
  text += ". let\n";
  for (std::size_t i = 0; i < program.equations.size(); ++i) text += "    " + equation_text(program, i, names) + "\n";
  text += "  in (";
  for (std::size_t i = 0; i < program.outputs.size(); ++i) {
    if (i > 0) text += ", ";
    text += name_of(program.outputs[i], names);
  }
  text += program.outputs.size() == 1 ? ",) }" : ") }";
  return text;
}

}  // namespace weft::program
