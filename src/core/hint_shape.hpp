#pragma once
// The shape a hint file's header says it was written for, taken where the caller gave none:
// `rrfp schedule check/show` and Python's rrfp.schedule read a file in its own shape (a file
// written at pp 2 was refused as "written for pp=2 but the run has pp=4", the defaults).
#include <array>
#include <string>

namespace rrfp {

struct HintShape {
  int pp = 0, vpp = 0, microbatches = 0;
  std::string placement;
};

// Whether the caller gave each of the shape's fields, in HintShape's order (pp, vpp,
// microbatches, placement).
using ShapeGiven = std::array<bool, 4>;

// Takes the value `path`'s header gives for each field not given; returns whether any of pp,
// vpp and microbatches came from the file, and sets in `taken`, where given, each field that did. A
// value out of range is left to the file's own check, which names the file. Throws InputError
// naming the file for a text header's field given twice, a shape past kMaxChunkMicrobatches, and
// the file's vshape placement with a vpp other than 2 (naming `vpp_name`, the caller's word for
// vpp, where it was given).
bool take_hint_file_shape(const std::string& path, HintShape& shape, const ShapeGiven& given,
                          const std::string& vpp_name, ShapeGiven* taken = nullptr);

}  // namespace rrfp
