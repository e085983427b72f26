//! Shared criterion benchmark bodies, generic over a [`StoreFactory`](crate::StoreFactory).
