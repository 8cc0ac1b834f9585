//! Integration tests, one binary so the suite links once.

mod common;
mod engine_basics;
