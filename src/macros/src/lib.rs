//! Derive macros of codeact, re-exported by the `codeact` crate; use them from there.
//!
//! `#[derive(FinalAnswer)]` marks a type as a typed final answer and checks, at
//! compile time, that every field may appear in one: free text must be
//! `codeact::UntrustedText`, so a plain `String` field is a compile error.
//!
//! ```ignore
//! use codeact::{FinalAnswer, UntrustedText};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema, FinalAnswer)]
//! struct Verdict {
//!     approved: bool,
//!     summary: UntrustedText, // `summary: String` does not compile
//! }
//! ```

use proc_macro::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput, Fields, Type, parse_macro_input, parse_quote};

/// Implements `codeact::FinalAnswer` and `codeact::output::AnswerField` for a struct or
/// enum, and asserts that every field's type implements `codeact::output::AnswerField`
/// (numbers, booleans, `UntrustedText`, other `FinalAnswer` types, and options,
/// vectors and maps of those; not `String`). Type parameters must implement
/// `AnswerField` too. Unions are refused.
#[proc_macro_derive(FinalAnswer)]
pub fn derive_final_answer(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn expand(mut input: DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let fields: Vec<Type> = match &input.data {
        Data::Struct(data) => field_types(&data.fields),
        Data::Enum(data) => data
            .variants
            .iter()
            .flat_map(|variant| field_types(&variant.fields))
            .collect(),
        Data::Union(data) => {
            return Err(syn::Error::new_spanned(
                data.union_token,
                "FinalAnswer cannot be derived for a union: use a struct or an enum",
            ));
        }
    };
    let type_params: Vec<syn::Ident> = input
        .generics
        .type_params()
        .map(|param| param.ident.clone())
        .collect();
    {
        let where_clause = input.generics.make_where_clause();
        for param in &type_params {
            where_clause
                .predicates
                .push(parse_quote!(#param: ::codeact::output::AnswerField));
        }
    }
    let name = &input.ident;
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
    // Each field gets its own assertion, spanned at the field's type, so the
    // compiler points at the offending field.
    let checks = fields.iter().map(|ty| {
        quote::quote_spanned! {syn::spanned::Spanned::span(ty)=>
            ::codeact::__assert_answer_field::<#ty>();
        }
    });
    Ok(quote! {
        impl #impl_generics ::codeact::output::AnswerField for #name #type_generics #where_clause {}
        impl #impl_generics ::codeact::FinalAnswer for #name #type_generics #where_clause {}
        const _: () = {
            #[allow(dead_code)]
            fn __final_answer_fields #impl_generics () #where_clause {
                #(#checks)*
            }
        };
    })
}

fn field_types(fields: &Fields) -> Vec<Type> {
    fields.iter().map(|field| field.ty.clone()).collect()
}
