#pragma once
// The names a stopped sweep writes under, so that a file under --csv's or --md's own name is
// always a whole grid's (a partial CSV there read as a smaller grid's, the last point's seeds
// cut short among its rows).
#include <string>

namespace rrfp {

// "p.csv" -> "p.partial.csv", "out" -> "out.partial": the extension kept, in the same folder.
std::string partial_name(const std::string& path);

// After a whole grid, where an earlier stopped one's partial files of `csv` and `md` (md may be
// empty: none) are left, said ("; a.partial.csv, of an earlier grid that was stopped, left as
// it was"), or "" where none is: beside the whole grid's files they read as this run's.
std::string stale_partials(const std::string& csv, const std::string& md);

// Refuses (InputError, naming --csv and --md) names whose partial names are the other
// output's own: --csv a.partial.csv --md a.csv overwrote the CSV with the summary.
void refuse_partial_names(const std::string& csv, const std::string& md);

}  // namespace rrfp
