//! The conversions between the domain types and their stored records, generated: a record
//! and its domain type are listed once, field by field or variant by variant
//! ([`mirror_structs!`], [`mirror_variants!`]), and both `From` impls come from that list.
//! Each side is destructured whole and built whole, so a field added to either fails to
//! compile until it is listed (and stored: docs/checklists/new-job-field.md); each field goes
//! through [`Mirror`], which knows the containers (options, lists, pairs, boxes) and the
//! leaves (the same type, or a pair declared by [`mirror_via_from!`]).

/// A value converted to its counterpart across the store's edge: what every listed field
/// goes through.
pub trait Mirror<T> {
    fn mirror(self) -> T;
}

/// Types stored as they are.
macro_rules! mirror_same {
    ($($t:ty),+ $(,)?) => {$(
        impl $crate::state::stored::mirror::Mirror<$t> for $t {
            fn mirror(self) -> $t {
                self
            }
        }
    )+};
}

/// Pairs that already convert by `From` both ways (the record enums, and records whose
/// shape differs from their domain type's).
macro_rules! mirror_via_from {
    ($($record:ty => $domain:ty),+ $(,)?) => {$(
        impl $crate::state::stored::mirror::Mirror<$domain> for $record {
            fn mirror(self) -> $domain {
                <$domain>::from(self)
            }
        }

        impl $crate::state::stored::mirror::Mirror<$record> for $domain {
            fn mirror(self) -> $record {
                <$record>::from(self)
            }
        }
    )+};
}

/// `From` both ways (and [`Mirror`]) between structs with the same field names, each field
/// converted by [`Mirror`].
macro_rules! mirror_structs {
    ($($record:ident <=> $domain:path { $($field:ident),+ $(,)? })+) => {$(
        impl From<$domain> for $record {
            fn from(value: $domain) -> Self {
                use $crate::state::stored::mirror::Mirror;
                let $domain { $($field),+ } = value;
                $record { $($field: $field.mirror()),+ }
            }
        }

        impl From<$record> for $domain {
            fn from(value: $record) -> Self {
                use $crate::state::stored::mirror::Mirror;
                let $record { $($field),+ } = value;
                $domain { $($field: $field.mirror()),+ }
            }
        }

        mirror_via_from!($record => $domain);
    )+};
}

/// `From` both ways between enums whose variants have the same names and named fields, each
/// field converted by [`Mirror`].
macro_rules! mirror_variants {
    ($record:ident <=> $domain:ident {
        $($variant:ident { $($field:ident),* $(,)? }),+ $(,)?
    }) => {
        impl From<$domain> for $record {
            fn from(value: $domain) -> Self {
                #[allow(unused_imports)]
                use $crate::state::stored::mirror::Mirror;
                match value {
                    $($domain::$variant { $($field),* } => $record::$variant {
                        $($field: $field.mirror()),*
                    }),+
                }
            }
        }

        impl From<$record> for $domain {
            fn from(value: $record) -> Self {
                #[allow(unused_imports)]
                use $crate::state::stored::mirror::Mirror;
                match value {
                    $($record::$variant { $($field),* } => $domain::$variant {
                        $($field: $field.mirror()),*
                    }),+
                }
            }
        }
    };
}

pub(crate) use {mirror_same, mirror_structs, mirror_variants, mirror_via_from};

impl<A: Mirror<B>, B> Mirror<Option<B>> for Option<A> {
    fn mirror(self) -> Option<B> {
        self.map(Mirror::mirror)
    }
}

impl<A: Mirror<B>, B> Mirror<Vec<B>> for Vec<A> {
    fn mirror(self) -> Vec<B> {
        self.into_iter().map(Mirror::mirror).collect()
    }
}

impl<A: Mirror<B>, B> Mirror<Box<B>> for Box<A> {
    fn mirror(self) -> Box<B> {
        Box::new((*self).mirror())
    }
}

impl<A1: Mirror<B1>, B1, A2: Mirror<B2>, B2> Mirror<(B1, B2)> for (A1, A2) {
    fn mirror(self) -> (B1, B2) {
        (self.0.mirror(), self.1.mirror())
    }
}

mirror_same!(bool, u8, i32, u32, u64, String, [u8; 32]);

/// A script is stored by the SHA-256 its id is.
impl Mirror<[u8; 32]> for xce_client::types::ScriptId {
    fn mirror(self) -> [u8; 32] {
        self.0
    }
}

impl Mirror<xce_client::types::ScriptId> for [u8; 32] {
    fn mirror(self) -> xce_client::types::ScriptId {
        xce_client::types::ScriptId(self)
    }
}

/// A script's bytes, shared in memory, are stored as a byte list.
impl Mirror<Vec<u8>> for std::sync::Arc<[u8]> {
    fn mirror(self) -> Vec<u8> {
        self.to_vec()
    }
}

impl Mirror<std::sync::Arc<[u8]>> for Vec<u8> {
    fn mirror(self) -> std::sync::Arc<[u8]> {
        self.into()
    }
}

/// A request token is stored as its number.
impl Mirror<u128> for xce_client::types::RequestToken {
    fn mirror(self) -> u128 {
        self.0
    }
}

impl Mirror<xce_client::types::RequestToken> for u128 {
    fn mirror(self) -> xce_client::types::RequestToken {
        xce_client::types::RequestToken(self)
    }
}

/// A placement is stored as its job id and host.
impl Mirror<(u64, String)> for xce_client::types::Placement {
    fn mirror(self) -> (u64, String) {
        (self.id, self.host)
    }
}

impl Mirror<xce_client::types::Placement> for (u64, String) {
    fn mirror(self) -> xce_client::types::Placement {
        xce_client::types::Placement {
            id: self.0,
            host: self.1,
        }
    }
}
