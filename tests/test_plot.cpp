// The line plot of loss.svg: its step axis is labelled where the ticks are.
#include <gtest/gtest.h>

#include <regex>

#include "report/report.hpp"

namespace rrfp {
namespace {

// The x-axis labels, in order: the middle-anchored texts below the frame.
std::vector<std::string> x_labels(const std::string& svg) {
  std::vector<std::string> out;
  const std::regex label("text-anchor=\"middle\">([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), label); it != std::sregex_iterator();
       ++it)
    out.push_back((*it)[1]);
  out.pop_back();  // the axis's name
  return out;
}

// Each label at its own tick: over 10 steps the ticks at 2.5 and 7.5 read 2 and 8, over 6
// steps those at 1.5 and 4.5 read 2 and 4.
TEST(Plot, StepTicksAreWholeStepsLabelledExactly) {
  auto steps = [](int n) {
    PlotSeries s{"train loss", "#000", {}};
    for (int i = 1; i <= n; ++i)
      s.points.push_back({static_cast<double>(i), 5.0 - 0.1 * i});
    return x_labels(svg_line_plot("loss", "step", {s}));
  };
  EXPECT_EQ(steps(10), (std::vector<std::string>{"0", "2", "4", "6", "8", "10"}));
  EXPECT_EQ(steps(6), (std::vector<std::string>{"0", "2", "4", "6"}));
  EXPECT_EQ(steps(600), (std::vector<std::string>{"0", "200", "400", "600"}));
  EXPECT_EQ(steps(1), (std::vector<std::string>{"0", "1"}));
  const std::string svg = svg_line_plot("loss", "step", {{"a", "#000", {{1, 1}, {10, 2}}}});
  // The tick at 4 sits 4/10 of the 640-pixel frame right of its left edge at 60.
  EXPECT_NE(svg.find("<text x=\"316.0\" y=\"378\" text-anchor=\"middle\">4</text>"),
            std::string::npos)
      << svg;
}

// A series of one point (train's single validation at its last step) is drawn as a dot: its
// polyline has no length and showed nothing. Longer series get none.
TEST(Plot, ASeriesOfOnePointIsADot) {
  const std::string svg = svg_line_plot(
      "loss", "step", {{"train", "#000", {{1, 3}, {3, 2}}}, {"validation", "#e15759", {{3, 2.5}}}});
  EXPECT_EQ(svg.find("<circle"), svg.rfind("<circle")) << svg;
  EXPECT_NE(svg.find("r=\"3\" fill=\"#e15759\"/>"), std::string::npos) << svg;
}

}  // namespace
}  // namespace rrfp
