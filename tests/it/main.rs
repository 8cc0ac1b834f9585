//! Integration tests, one binary so the suite links once.

mod aggregate;
mod cli;
mod collectd;
mod common;
mod compaction;
mod connections;
mod corruption;
mod counter_crash;
mod counters;
mod crash_recovery;
mod dashboard;
mod engine_basics;
mod full_disk;
mod hostile_writes;
mod ingest_load;
mod install_deps;
mod model;
mod read_budget;
mod render;
mod reopen;
mod rolling;
mod serve_binary;
mod server;
mod stress;
mod support;
mod time_grammar;
