//! The embedded AWS instance-type catalogue.
