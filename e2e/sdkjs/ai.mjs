// The Vercel AI SDK's framework-free chat (bundled by `make deps-sdk-js`): the
// AbstractChat and DefaultChatTransport that useChat runs on.
export { AbstractChat, DefaultChatTransport } from 'ai';
