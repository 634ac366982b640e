//! What the index keeps of each object it watches: the facts rounds read,
//! parsed once when the object arrives.

pub(crate) mod binding;
pub(crate) mod budget;
pub(crate) mod containers;
pub(crate) mod gang;
pub(crate) mod node;
pub(crate) mod pod;
pub(crate) mod resource;
pub(crate) mod tenant;
