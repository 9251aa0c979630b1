//! The metadata image. See lib.rs.
