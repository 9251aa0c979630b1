//! The metadata quorum (openraft). See lib.rs.
