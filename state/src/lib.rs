//! The durable store on sled: the only code that touches the database.
