// rrfp: readiness-first pipeline-parallel runtime. Exit codes: 0 ok, 1 a run failed
// (deadlock, collective mismatch, internal error), 2 bad input (one line on stderr).
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/options.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"rrfp: pipeline-parallel training that treats the schedule as a hint"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");
  rrfp::setup_train(app);
  rrfp::setup_simulate(app);
  rrfp::setup_run(app);
  rrfp::setup_schedule(app);
  rrfp::setup_sweep(app);
  rrfp::setup_plan(app);
  rrfp::setup_predict(app);
  rrfp::setup_calibrate(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const rrfp::QuietExit& e) {
    return e.code;
  } catch (const CLI::ParseError& e) {
    std::cerr << "rrfp: error: " << e.what() << "\n";
    return 2;
  } catch (const rrfp::InputError& e) {
    std::cerr << "rrfp: error: " << rrfp::as_flags(e.what()) << "\n";
    return 2;
  } catch (const rrfp::Error& e) {
    std::cerr << "rrfp: run failed: " << rrfp::as_flags(e.what()) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "rrfp: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
