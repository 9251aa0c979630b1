//! The controller. See lib.rs.
