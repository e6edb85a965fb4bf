//! placeholder during bring-up
#![allow(dead_code)]
mod raw;
mod report;
mod schema;
