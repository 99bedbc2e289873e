#include "core/hint_shape.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/hint_io.hpp"
#include "core/printable.hpp"
#include "core/work_model.hpp"

namespace rrfp {

namespace {

// The header's keys of HintShape's fields, in its order.
constexpr std::array<std::string_view, 4> kKeys = {"pp", "vpp", "microbatches", "placement"};

}  // namespace

bool take_hint_file_shape(const std::string& path, HintShape& shape, const ShapeGiven& given,
                          const std::string& vpp_name, ShapeGiven* taken) {
  if (std::all_of(given.begin(), given.end(), [](bool g) { return g; })) return false;
  const HintFields declared = hint_file_fields(path);
  bool from_file = false, vpp_from_file = false;
  for (const auto& [key, value, string] : declared.fields) {
    const auto field =
        static_cast<std::size_t>(std::find(kKeys.begin(), kKeys.end(), key) - kKeys.begin());
    if (field == kKeys.size() || given[field]) continue;
    // Its last value taken as the run's, its first was refused as another run's ("written for
    // pp=1 but the run has pp=2"), where the parser says the field is given twice.
    if (!declared.json && std::find(declared.repeated.begin(), declared.repeated.end(), key) !=
                              declared.repeated.end())
      throw InputError(path + ":" + std::to_string(declared.header_line) + ": header field " +
                       printable(key) + " is given twice");
    if (key == "placement") {
      if (value == "loop" || value == "vshape") {
        shape.placement = value;
        if (taken) (*taken)[field] = true;
      }
      continue;
    }
    // JSON's parser takes a whole number however written (2, 2.0, 2e0); a string is none.
    char* end = nullptr;
    const double v = declared.json ? std::strtod(value.c_str(), &end)
                                   : static_cast<double>(std::strtol(value.c_str(), &end, 10));
    if (value.empty() || *end != '\0' || string || v != std::floor(v) || v < 1 ||
        v > kMaxChunkMicrobatches)
      continue;
    (field == 0 ? shape.pp : field == 1 ? shape.vpp : shape.microbatches) = static_cast<int>(v);
    from_file = true;
    vpp_from_file = vpp_from_file || field == 1;
    if (taken) (*taken)[field] = true;
  }
  // Too large a shape of the file's was refused as the caller's settings', which were not given.
  const double n = chunk_microbatches(shape.pp, shape.vpp, shape.microbatches);
  if (from_file && n > kMaxChunkMicrobatches)
    throw InputError(path + ": written for pp x vpp x microbatches = " + std::to_string(shape.pp) +
                     " x " + std::to_string(shape.vpp) + " x " +
                     std::to_string(shape.microbatches) + " = " + fmt("%.16g", n) +
                     " (with the shape given), past the " + std::to_string(kMaxChunkMicrobatches) +
                     " chunk-microbatches a step may have");
  // The file's own placement with a V that cannot take it was refused as "placement vshape:
  // needs vpp 2", a setting not given.
  if (shape.placement == "vshape" && shape.vpp != 2 && !given[3])
    throw InputError(
        path + ": written for placement vshape, which needs vpp 2, but the run has vpp " +
        std::to_string(shape.vpp) +
        (given[1] ? " (" + vpp_name + ")" : std::string(" (the file's, or the default)")));
  // And the placement given with the file's V: refused as "needs vpp 2, got vpp 1", as if that
  // V were given.
  if (shape.placement == "vshape" && shape.vpp != 2 && given[3] && vpp_from_file)
    throw InputError(path + ": written for vpp " + std::to_string(shape.vpp) +
                     ", but the placement given, vshape, needs vpp 2");
  return from_file;
}

}  // namespace rrfp
