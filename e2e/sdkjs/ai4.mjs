// AI SDK 4's chat request (bundled by `make deps-sdk-js`): callChatApi, what
// useChat in @ai-sdk/react 1.x runs, reading the data stream protocol.
export { callChatApi } from '@ai-sdk/ui-utils';
