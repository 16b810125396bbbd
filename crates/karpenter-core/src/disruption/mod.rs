pub mod candidates;
pub mod emptiness;
