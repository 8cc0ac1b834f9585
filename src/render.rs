//! The storage-independent part of the Graphite render API that Grafana's Graphite data
//! source speaks: target parsing (`expr`), path patterns ([`PathPattern`]), `from`/`until` ([`parse_time`]) and
//! `/metrics/find` ([`find`]).

mod expr;
mod find;
mod path;
mod time;

pub use find::{find, FindNode};
pub use path::{graphite_path, parse_graphite_path, PathPattern};
pub use time::{parse_interval, parse_time};
